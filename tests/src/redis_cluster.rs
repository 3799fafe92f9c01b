//! Redis Cluster: three primaries started by the testkit, reached with
//! `redis+cluster://`; the same cases and hooks as the single node.
//!
//! A faulty client dials every node through a fault proxy of its own: its
//! seeds are the proxies, and each address the cluster announces is mapped to
//! its node's proxy (`cluster_dial_instead`), so a fault hits all its traffic,
//! redirections included. A restart restarts every node.

use crate::redis::{HOOKS, NAMESPACE};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, RedisCluster};
use std::sync::Arc;

/// How many primaries the suite's cluster has.
pub const PRIMARIES: usize = 3;

/// The Cluster spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "redis_cluster".into(),
        capabilities: RedisBackend::CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(ClusterHarness::launch().await?) as _) })),
    }
}

/// Starts a cluster on a blocking thread (the launcher's future is not `Send`).
pub async fn launch_cluster(primaries: usize) -> Result<RedisCluster, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    let start = move || runtime.block_on(RedisCluster::start(primaries));
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// The harness: a cluster of its own and the inspecting client.
#[derive(Debug)]
pub struct ClusterHarness {
    cluster: RedisCluster,
    url: String,
    inspector: DynLock,
}

impl ClusterHarness {
    /// A harness on a cluster of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let cluster = launch_cluster(PRIMARIES).await?;
        let url = cluster.url();
        let inspector = connect(RedisConfig::from_url(&url)?).await?;
        Ok(ClusterHarness {
            cluster,
            url,
            inspector,
        })
    }
}

async fn connect(config: RedisConfig) -> Result<DynLock, BoxError> {
    Ok(Arc::new(config.namespace(NAMESPACE).connect().await?))
}

/// The proxies of one faulty client, one per node, faulted together.
struct Proxies(Vec<FaultProxy>);

#[async_trait]
impl FaultControl for Proxies {
    async fn set_fault(&self, fault: Fault) {
        for proxy in &self.0 {
            proxy.set_fault(fault).await;
        }
    }
}

#[async_trait]
impl Harness for ClusterHarness {
    fn name(&self) -> &str {
        "redis_cluster"
    }

    fn capabilities(&self) -> Capabilities {
        RedisBackend::CAPABILITIES
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        connect(RedisConfig::from_url(&self.url)?).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let mut proxies = Vec::new();
        for node in self.cluster.nodes() {
            proxies.push(FaultProxy::start(node.addr()).await?);
        }
        let seeds: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        let mut config = RedisConfig::from_url(&format!("redis+cluster://{}/", seeds.join(",")))?;
        for proxy in &proxies {
            let (node, dialed) = (proxy.upstream(), proxy.addr());
            config = config.cluster_dial_instead(
                (&node.ip().to_string(), node.port()),
                (&dialed.ip().to_string(), dialed.port()),
            );
        }
        Ok(FaultyClient::new(
            connect(config).await?,
            Arc::new(Proxies(proxies)),
        ))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        Some(&self.cluster as &dyn Launched)
    }

    fn lock_url(&self) -> Option<String> {
        Some(format!("{}?namespace={NAMESPACE}", self.url))
    }
}
