//! etcd: a one-member etcd started by the testkit, or `DISTLOCK_TEST_ETCD_URL`
//! (an `etcd://` URL, or `http://host:port` as the launcher prints it).
//!
//! Every hook is offered: operator deletion and residue through the adapter's own
//! `Inspect` on one cached client, faults through a TCP fault proxy per faulty
//! client, restarts on a dedicated server (its data dir is kept, so revisions, and
//! with them tokens, persist).

use async_trait::async_trait;
use distlock_core::toolkit::Timeouts;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_etcd::{EtcdBackend, EtcdConfig};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{EtcdServer, Launched, external_url};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The namespace the suite's locks live under.
pub const NAMESPACE: &str = "distlock-conformance/";

const HOOKS: Hooks = Hooks {
    delete_lock: true,
    faulty_client: true,
    restart: true,
    residue: true,
    holder_process: true,
};

/// The etcd backend's spec. The minimum ttl is the launched etcd's (2 s: its
/// election timeout is etcd's default 1 s); the harness reports what the server
/// really grants.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "etcd".into(),
        capabilities: EtcdBackend::capabilities_with_min_ttl(Duration::from_secs(2)),
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(EtcdHarness::start().await?) as _) })),
    }
}

/// Starts a one-member etcd. The launcher's future is not `Send` (its retry helper
/// takes an async closure) and harness futures must be, so it runs on a blocking
/// thread of the same runtime.
pub async fn launch_server() -> Result<EtcdServer, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(EtcdServer::start())).await??)
}

/// The harness: a server (launched or external) and one cached client whose
/// `Inspect` does what an operator would do by hand.
pub struct EtcdHarness {
    server: Option<EtcdServer>,
    config: EtcdConfig,
    addr: SocketAddr,
    inspector: DynLock,
}

impl std::fmt::Debug for EtcdHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdHarness")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("etcd") {
            Some(url) => {
                let url = match url.strip_prefix("http://") {
                    Some(hosts) => format!("etcd://{hosts}"),
                    None => url,
                };
                let config = EtcdConfig::from_url(&url)?.namespace(NAMESPACE);
                let endpoint = config
                    .endpoints()
                    .first()
                    .ok_or("DISTLOCK_TEST_ETCD_URL names no endpoint")?;
                let addr = tokio::net::lookup_host(endpoint)
                    .await?
                    .next()
                    .ok_or("the etcd endpoint does not resolve")?;
                Self::with(None, config, addr).await
            }
            None => Self::launch().await,
        }
    }

    /// A harness on a server of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let server = launch_server().await?;
        let config = EtcdConfig::new([server.addr().to_string()]).namespace(NAMESPACE);
        let addr = server.addr();
        Self::with(Some(server), config, addr).await
    }

    async fn with(
        server: Option<EtcdServer>,
        config: EtcdConfig,
        addr: SocketAddr,
    ) -> Result<Self, BoxError> {
        let inspector = Arc::new(config.clone().connect().await?);
        Ok(EtcdHarness {
            server,
            config,
            addr,
            inspector,
        })
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    fn name(&self) -> &str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        self.inspector.capabilities()
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(self.config.clone().connect().await?))
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        Ok(Arc::new(
            self.config.clone().state_ttl(state_ttl).connect().await?,
        ))
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let proxy = Arc::new(FaultProxy::start(self.addr).await?);
        let lock = EtcdConfig::new([proxy.addr().to_string()])
            .namespace(NAMESPACE)
            .timeouts(Timeouts::new(
                Duration::from_secs(5),
                Duration::from_secs(2),
            ))
            .connect()
            .await?;
        Ok(FaultyClient::new(Arc::new(lock), proxy))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        self.server.as_ref().map(|server| server as &dyn Launched)
    }

    fn lock_url(&self) -> Option<String> {
        Some(format!("etcd://{}/{NAMESPACE}", self.addr))
    }
}

/// A one-member etcd for the fence target.
pub async fn launch_url() -> Result<crate::Running, BoxError> {
    let server = launch_server().await?;
    Ok(crate::Running::new(
        format!("etcd://{}", server.addr()),
        server,
    ))
}
