//! Redis through Sentinel: a primary, one replica and three Sentinels started by
//! the testkit, reached with `redis+sentinel://`; the same cases and hooks as
//! the single node.
//!
//! Faulty clients are the exception: Sentinel hands a client the primary's real
//! address, so a fault proxy cannot sit in its path. They reach the same
//! primary through a proxy with a `redis://` URL; the Sentinel path itself is
//! exercised by every other case and by the failover tests.
//!
//! `redis_sentinel::chaos` and `redis_sentinel::chaos_wait_replicas` run it
//! with Sentinels that fail over after 500 ms ([`SentinelHarness::launch_chaos`]),
//! the primary and the replica each a fault target, every client carrying the
//! trial's URL parameters.

use crate::redis::{HOOKS, NAMESPACE, state_ttl_param, via, with_param};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, SentinelOptions, SentinelTopology};
use std::sync::Arc;
use std::time::Duration;

/// What the clients of a deployment that fails over promise.
const CAPABILITIES: Capabilities = RedisBackend::failing_over(RedisBackend::CAPABILITIES);

/// The Sentinel spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "redis_sentinel".into(),
        capabilities: CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(SentinelHarness::launch().await?) as _) })),
    }
}

/// Starts a topology on a blocking thread (the launcher's future is not `Send`).
pub async fn launch_topology(options: SentinelOptions) -> Result<SentinelTopology, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    let start = move || runtime.block_on(SentinelTopology::start(options));
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// The harness: a topology of its own and the inspecting client.
#[derive(Debug)]
pub struct SentinelHarness {
    topology: SentinelTopology,
    url: String,
    /// The URL parameters every client carries (the faulty ones too).
    params: &'static str,
    inspector: DynLock,
    /// Whether the replica is a fault target too (the chaos trials).
    both: bool,
}

impl SentinelHarness {
    /// A harness on a topology of its own. The Sentinels' default 5 s
    /// down-after keeps a clean restart of the primary from failing it over.
    pub async fn launch() -> Result<Self, BoxError> {
        Self::on(
            launch_topology(SentinelOptions::default()).await?,
            "",
            false,
        )
        .await
    }

    /// A harness for the chaos trials: the Sentinels fail the primary over
    /// after 500 ms of silence (so the fault menu's pauses and kills do), and
    /// every client carries `params`, such as `wait_replicas=1`.
    pub async fn launch_chaos(params: &'static str) -> Result<Self, BoxError> {
        let options = SentinelOptions {
            down_after: Duration::from_millis(500),
            failover_timeout: Duration::from_secs(2),
            ..SentinelOptions::default()
        };
        Self::on(launch_topology(options).await?, params, true).await
    }

    async fn on(
        topology: SentinelTopology,
        params: &'static str,
        both: bool,
    ) -> Result<Self, BoxError> {
        let url = with_param(&topology.url(), params);
        let inspector = connect(&url).await?;
        Ok(SentinelHarness {
            topology,
            url,
            params,
            inspector,
            both,
        })
    }
}

async fn connect(url: &str) -> Result<DynLock, BoxError> {
    Ok(Arc::new(
        RedisConfig::from_url(url)?
            .namespace(NAMESPACE)
            .connect()
            .await?,
    ))
}

#[async_trait]
impl Harness for SentinelHarness {
    fn name(&self) -> &str {
        "redis_sentinel"
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        connect(&self.url).await
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        connect(&with_param(&self.url, &state_ttl_param(state_ttl))).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let primary = self.topology.primary();
        let proxy = Arc::new(FaultProxy::start(primary.addr()).await?);
        let url = with_param(&via(&primary.url(), proxy.addr())?, self.params);
        Ok(FaultyClient::new(connect(&url).await?, proxy))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        Some(self.topology.primary() as &dyn Launched)
    }

    fn launched_all(&self) -> Vec<&dyn Launched> {
        let mut all: Vec<&dyn Launched> = vec![self.topology.primary()];
        if self.both {
            all.push(self.topology.replica());
        }
        all
    }

    fn lock_url(&self) -> Option<String> {
        Some(with_param(&self.url, &format!("namespace={NAMESPACE}")))
    }
}
