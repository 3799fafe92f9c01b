//! The fair (FIFO) Redis lock, `redis://…?fair=true`: the single-node harness
//! with every client fair, so the whole lock suite runs for it, `fifo_order`
//! included (its capabilities say FIFO).

use crate::redis::{HOOKS, RedisHarness};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::RedisBackend;
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, RedisOptions};
use std::sync::Arc;
use std::time::Duration;

/// The URL parameter every client of this harness carries.
const FAIR: &str = "fair=true";

/// The fair lock's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "redis_fair".into(),
        capabilities: RedisBackend::FAIR_CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(FairHarness::start().await?) as _) })),
    }
}

/// The single-node harness, every client fair.
#[derive(Debug)]
pub struct FairHarness(RedisHarness);

impl FairHarness {
    /// A harness on `DISTLOCK_TEST_REDIS_URL` when it is set, else on a server
    /// of its own.
    pub async fn start() -> Result<Self, BoxError> {
        Ok(FairHarness(RedisHarness::start_with(FAIR).await?))
    }

    /// A harness on a server of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let fair = RedisHarness::launch_with(RedisOptions::default(), FAIR);
        Ok(FairHarness(fair.await?))
    }
}

#[async_trait]
impl Harness for FairHarness {
    fn name(&self) -> &str {
        "redis_fair"
    }

    fn capabilities(&self) -> Capabilities {
        RedisBackend::FAIR_CAPABILITIES
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        self.0.client().await
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        self.0.client_with_state_ttl(state_ttl).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        self.0.faulty_client().await
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        self.0.inspector().await
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        self.0.launched()
    }

    fn lock_url(&self) -> Option<String> {
        self.0.lock_url()
    }
}
