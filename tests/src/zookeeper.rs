//! ZooKeeper: a standalone `ZooKeeperServerMain` started by the testkit (tickTime
//! 200 ms, so sessions of 400 ms and up), or `DISTLOCK_TEST_ZOOKEEPER_URL`.
//!
//! Every hook is offered: operator deletion and residue through an admin session,
//! faults through a TCP fault proxy per faulty client, restarts on a dedicated
//! server.

use async_trait::async_trait;
use distlock_core::{
    BoxError, Capabilities, DistributedLock, DynLock, FencingGuarantee, LockKey, TokenDurability,
    Wake,
};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{ZooKeeperOptions, ZooKeeperServer, external_url};
use distlock_zookeeper::{ZkConfig, layout};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// The namespace the suite's locks live under.
const NAMESPACE: &str = "distlock-conformance";

/// The ZooKeeper backend's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "zookeeper".into(),
        capabilities: capabilities(),
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(ZkHarness::start().await?) as _) })),
    }
}

const HOOKS: Hooks = Hooks {
    delete_lock: true,
    faulty_client: true,
    restart: true,
    residue: true,
};

/// What the adapter reports against the launched server, known before it starts
/// (cases are chosen from these; timings come from the connected client's).
fn capabilities() -> Capabilities {
    Capabilities {
        fencing: FencingGuarantee::Strict,
        fifo: true,
        wake: Wake::Push,
        session_bound: true,
        token_durability: TokenDurability::Persisted,
        min_ttl: ZooKeeperOptions::default().min_session_timeout,
        ttl_granularity: Duration::from_millis(1),
    }
}

/// Starts a server. `ZooKeeperServer::start`'s future is not `Send` (the
/// testkit's retry helper takes an async closure), and harness futures must be,
/// so it runs on a blocking thread of the same runtime.
pub async fn launch_server() -> Result<ZooKeeperServer, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(ZooKeeperServer::start())).await??)
}

/// Where the servers are: launched by the testkit, or given by URL.
#[derive(Debug)]
enum Server {
    Launched(Box<ZooKeeperServer>),
    External,
}

/// The harness: a server, an admin session on it, and the clients' base config.
#[derive(Debug)]
pub struct ZkHarness {
    server: Server,
    config: ZkConfig,
    admin: zk::Client,
    /// As a connected client reports them: the minimum ttl is the server's.
    capabilities: Capabilities,
}

impl ZkHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("zookeeper") {
            Some(url) => {
                let config = ZkConfig::from_url(&url)?;
                Self::with_server(Server::External, config).await
            }
            None => Self::launch().await,
        }
    }

    async fn launch() -> Result<Self, BoxError> {
        let server = launch_server().await?;
        let config = ZkConfig {
            endpoints: vec![server.url()],
            ..ZkConfig::default()
        };
        Self::with_server(Server::Launched(Box::new(server)), config).await
    }

    async fn with_server(server: Server, mut config: ZkConfig) -> Result<Self, BoxError> {
        config.namespace = NAMESPACE.into();
        let admin = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(&config.endpoints.join(","))
            .await?;
        let admin = match &config.chroot {
            Some(chroot) => admin.chroot(chroot.clone()).map_err(|_| "bad chroot")?,
            None => admin,
        };
        let probe = config.clone().connect().await?;
        let capabilities = probe.capabilities();
        Ok(ZkHarness {
            server,
            config,
            admin,
            capabilities,
        })
    }

    async fn connect(&self, config: ZkConfig) -> Result<DynLock, BoxError> {
        Ok(Arc::new(config.connect().await?))
    }
}

#[async_trait]
impl Harness for ZkHarness {
    fn name(&self) -> &str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        self.connect(self.config.clone()).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let upstream = match &self.server {
            Server::Launched(server) => server.addr(),
            Server::External => {
                let first = self.config.endpoints.first().ok_or("no endpoint")?;
                tokio::net::lookup_host(first.as_str())
                    .await?
                    .next()
                    .ok_or("endpoint does not resolve")?
            }
        };
        let proxy = Arc::new(FaultProxy::start(upstream).await?);
        let config = ZkConfig {
            endpoints: vec![proxy.addr().to_string()],
            ..self.config.clone()
        };
        Ok(FaultyClient {
            lock: self.connect(config).await?,
            faults: proxy,
        })
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        let dir = layout::lock_dir(NAMESPACE, key.as_str());
        let children = self.admin.list_children(&dir).await?;
        let holder = layout::sort_queue(children)
            .into_iter()
            .next()
            .ok_or("no lock node to delete")?;
        Ok(self.admin.delete(&format!("{dir}/{holder}"), None).await?)
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    async fn restart_server(&self) -> Result<(), BoxError> {
        match &self.server {
            Server::Launched(server) => Ok(server.restart().await?),
            Server::External => Err("cannot restart an external server".into()),
        }
    }

    async fn residue(&self, prefix: &str) -> Result<usize, BoxError> {
        let dirs = match self.admin.list_children(&format!("/{NAMESPACE}")).await {
            Err(zk::Error::NoNode) => return Ok(0),
            other => other?,
        };
        let mut nodes = 0;
        for dir in dirs {
            if layout::unescape_name(&dir).is_some_and(|name| name.starts_with(prefix)) {
                let stat = self
                    .admin
                    .check_stat(&format!("/{NAMESPACE}/{dir}"))
                    .await?;
                nodes += stat.map_or(0, |s| usize::try_from(s.num_children).unwrap_or(0));
            }
        }
        Ok(nodes)
    }

    fn server_logs(&self) -> String {
        match &self.server {
            Server::Launched(server) => server.log_tail(40),
            Server::External => format!("(external server {})", self.config.endpoints.join(",")),
        }
    }
}
