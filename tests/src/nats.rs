//! NATS: a `nats-server -js` started by the testkit, or `DISTLOCK_TEST_NATS_URL`.
//!
//! Every hook is offered: operator deletion and residue through the adapter's own
//! `Inspect` on one cached client, faults through a TCP fault proxy per faulty
//! client, restarts on a dedicated server (its JetStream store is kept, so the
//! bucket's sequence, and with it the tokens, persists).

use crate::chaos::{ALL, Spec};
use async_trait::async_trait;
use distlock_core::toolkit::Timeouts;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_nats::NatsConfig;
use distlock_testkit::chaos::Requirement;
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, NatsServer, external_url};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The bucket the suite's locks live in.
pub const BUCKET: &str = "distlock-conformance";

const HOOKS: Hooks = Hooks {
    delete_lock: true,
    faulty_client: true,
    restart: true,
    residue: true,
    holder_process: true,
};

/// The NATS backend's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "nats".into(),
        capabilities: distlock_nats::NatsBackend::CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(NatsHarness::start().await?) as _) })),
    }
}

/// `nats::chaos`: a lone server, every fault.
pub fn chaos() -> Vec<Spec> {
    vec![Spec {
        trial: "nats::chaos",
        backend: "nats",
        start: || Box::pin(async { Ok(Arc::new(NatsHarness::launch().await?) as _) }),
        faults: ALL,
        exclusion: Requirement::Required,
    }]
}

/// Starts a server. The launcher's future is not `Send` (its retry helper takes
/// an async closure) and harness futures must be, so it runs on a blocking
/// thread of the same runtime.
pub async fn launch_server() -> Result<NatsServer, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(NatsServer::start())).await??)
}

/// The harness: a server (launched or external) and one cached client whose
/// `Inspect` does what an operator would do by hand.
pub struct NatsHarness {
    server: Option<NatsServer>,
    config: NatsConfig,
    addr: SocketAddr,
    inspector: DynLock,
}

impl std::fmt::Debug for NatsHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsHarness")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl NatsHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("nats") {
            Some(url) => {
                let config = NatsConfig::from_url(&url)?.bucket(BUCKET);
                let host = url
                    .split("://")
                    .nth(1)
                    .and_then(|rest| rest.split([',', '/', '?']).next())
                    .ok_or("DISTLOCK_TEST_NATS_URL names no server")?;
                let addr = tokio::net::lookup_host(host)
                    .await?
                    .next()
                    .ok_or("the NATS server does not resolve")?;
                Self::with(None, config, addr).await
            }
            None => Self::launch().await,
        }
    }

    /// A harness on a server of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let server = launch_server().await?;
        let addr = server.addr();
        let config = NatsConfig::new([addr.to_string()]).bucket(BUCKET);
        Self::with(Some(server), config, addr).await
    }

    async fn with(
        server: Option<NatsServer>,
        config: NatsConfig,
        addr: SocketAddr,
    ) -> Result<Self, BoxError> {
        let inspector = Arc::new(config.clone().connect().await?);
        Ok(NatsHarness {
            server,
            config,
            addr,
            inspector,
        })
    }
}

#[async_trait]
impl Harness for NatsHarness {
    fn name(&self) -> &str {
        "nats"
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
        let lock = NatsConfig::new([proxy.addr().to_string()])
            .bucket(BUCKET)
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
        Some(format!("nats://{}/{BUCKET}", self.addr))
    }
}

/// A server for the fence target.
pub async fn launch_url() -> Result<crate::Running, BoxError> {
    let server = launch_server().await?;
    Ok(crate::Running::new(server.url(), server))
}
