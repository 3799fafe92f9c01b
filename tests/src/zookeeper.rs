//! ZooKeeper: a standalone `ZooKeeperServerMain` started by the testkit (tickTime
//! 200 ms, so sessions of 400 ms and up), or `DISTLOCK_TEST_ZOOKEEPER_URL`.
//!
//! Every hook is offered: operator deletion and residue through the adapter's own
//! `Inspect`, faults through a TCP fault proxy per faulty client, restarts on a
//! dedicated server.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, ZooKeeperOptions, ZooKeeperServer, external_url};
use distlock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::Arc;
use std::time::Duration;

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
    holder_process: true,
};

/// What the adapter reports against the launched server, known before it starts
/// (cases are chosen from these; timings come from the connected client's).
fn capabilities() -> Capabilities {
    ZkBackend::capabilities_with_min_ttl(ZooKeeperOptions::default().min_session_timeout)
}

/// Starts a server. `ZooKeeperServer::start`'s future is not `Send` (the
/// testkit's retry helper takes an async closure), and harness futures must be,
/// so it runs on a blocking thread of the same runtime.
pub async fn launch_server() -> Result<ZooKeeperServer, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    let options = ZooKeeperOptions {
        // Empty lock directories go within the bounded-state cases' slack.
        container_check_interval: Duration::from_millis(500),
        ..ZooKeeperOptions::default()
    };
    let start = move || runtime.block_on(ZooKeeperServer::start_with(options));
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// Where the servers are: launched by the testkit, or given by URL.
#[derive(Debug)]
enum Server {
    Launched(Box<ZooKeeperServer>),
    External,
}

/// The harness: a server, the clients' base config, and the client the fault
/// hooks inspect through.
#[derive(Debug)]
pub struct ZkHarness {
    server: Server,
    config: ZkConfig,
    inspector: DynLock,
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

    /// A harness on a server of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let server = launch_server().await?;
        let config = ZkConfig::new([server.url()]);
        Self::with_server(Server::Launched(Box::new(server)), config).await
    }

    async fn with_server(server: Server, config: ZkConfig) -> Result<Self, BoxError> {
        let config = config.namespace(NAMESPACE);
        let inspector: DynLock = Arc::new(config.clone().connect().await?);
        let capabilities = inspector.capabilities();
        Ok(ZkHarness {
            server,
            config,
            inspector,
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

    /// The server reaps empty containers on its own schedule (every 500 ms on
    /// the launched server, see [`launch_server`]), whatever `state_ttl` says.
    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        self.connect(self.config.clone().state_ttl(state_ttl)).await
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
        Ok(FaultyClient::new(self.connect(config).await?, proxy))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        match &self.server {
            Server::Launched(server) => Some(&**server),
            Server::External => None,
        }
    }

    fn lock_url(&self) -> Option<String> {
        match &self.server {
            Server::Launched(server) => {
                Some(format!("zk://{}?namespace={NAMESPACE}", server.addr()))
            }
            Server::External => None,
        }
    }
}

/// A standalone ZooKeeper for the fence target.
pub async fn launch_url() -> Result<crate::Running, BoxError> {
    let server = launch_server().await?;
    Ok(crate::Running::new(
        format!("zk://{}", server.addr()),
        server,
    ))
}
