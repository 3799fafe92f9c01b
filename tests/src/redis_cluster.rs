//! Redis Cluster: three primaries started by the testkit, reached with
//! `redis+cluster://`; the same cases and hooks as the single node.
//!
//! A faulty client dials every node through a fault proxy of its own: its
//! seeds are the proxies, and each address the cluster announces is mapped to
//! its node's proxy (`cluster_dial_instead`), so a fault hits all its traffic,
//! redirections included. A restart restarts every node.
//!
//! `redis_cluster_fair` runs the same harness with every client fair
//! (`fair=true`): the whole lock suite, `fifo_order` included, on a cluster,
//! where the turn of each waiter is handed over by `SPUBLISH`.
//!
//! `redis_cluster::chaos` runs it on three primaries with a replica each
//! ([`ClusterHarness::launch_replicated`]), every node a fault target of its
//! own, so a killed or paused primary is failed over to its replica.

use crate::redis::{HOOKS, NAMESPACE, state_ttl_param, with_param};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, RedisCluster, RedisOptions};
use std::sync::Arc;
use std::time::Duration;

/// How many primaries the suite's cluster has.
pub const PRIMARIES: usize = 3;

/// The Cluster spec.
pub fn spec() -> BackendSpec {
    spec_of(Flavour::Plain)
}

/// The Cluster spec with every client fair (`fair=true`).
pub fn fair_spec() -> BackendSpec {
    spec_of(Flavour::Fair)
}

fn spec_of(flavour: Flavour) -> BackendSpec {
    BackendSpec {
        name: flavour.name().into(),
        capabilities: flavour.capabilities(),
        hooks: HOOKS,
        start: Box::new(move || {
            Box::pin(async move { Ok(Arc::new(ClusterHarness::launch(flavour).await?) as _) })
        }),
    }
}

/// Which lock the harness's clients take.
#[derive(Debug, Clone, Copy)]
enum Flavour {
    /// The plain lock.
    Plain,
    /// The fair (FIFO) lock, `fair=true`.
    Fair,
}

impl Flavour {
    fn name(self) -> &'static str {
        match self {
            Flavour::Plain => "redis_cluster",
            Flavour::Fair => "redis_cluster_fair",
        }
    }

    fn capabilities(self) -> Capabilities {
        match self {
            Flavour::Plain => RedisBackend::failing_over(RedisBackend::CAPABILITIES),
            Flavour::Fair => RedisBackend::failing_over(RedisBackend::FAIR_CAPABILITIES),
        }
    }

    /// The URL's query, after `?`, without the namespace.
    fn params(self) -> &'static str {
        match self {
            Flavour::Plain => "",
            Flavour::Fair => "fair=true",
        }
    }
}

/// Starts a cluster on a blocking thread (the launcher's future is not `Send`).
pub async fn launch_cluster(primaries: usize) -> Result<RedisCluster, BoxError> {
    launch_replicas(primaries, 0).await
}

/// [`launch_cluster`] with `replicas` replicas of each primary, every write
/// persisted (`appendfsync always`), so that a killed node restarts with its
/// data and only a failover can lose what a replica had not received.
async fn launch_replicas(primaries: usize, replicas: usize) -> Result<RedisCluster, BoxError> {
    let options = RedisOptions {
        aof: replicas > 0,
        ..RedisOptions::default()
    };
    let runtime = tokio::runtime::Handle::current();
    let start =
        move || runtime.block_on(RedisCluster::start_replicated(primaries, replicas, options));
    Ok(tokio::task::spawn_blocking(start).await??)
}

/// A failed primary's replica is promoted after this long without a reply
/// from it (the launcher's default is 2 s, longer than most chaos faults).
const FAILOVER_AFTER: &str = "300";

/// The harness: a cluster of its own and the inspecting client.
#[derive(Debug)]
pub struct ClusterHarness {
    cluster: RedisCluster,
    flavour: Flavour,
    url: String,
    inspector: DynLock,
    /// Whether each node is a fault target of its own (the replicated chaos
    /// cluster), rather than the cluster restarted as a whole.
    per_node: bool,
}

impl ClusterHarness {
    /// A harness on a cluster of its own.
    async fn launch(flavour: Flavour) -> Result<Self, BoxError> {
        Self::on(launch_cluster(PRIMARIES).await?, flavour, false).await
    }

    /// A harness on three primaries with a replica each, failing over after
    /// 300 ms without a reply: `redis_cluster::chaos`.
    pub async fn launch_replicated() -> Result<Self, BoxError> {
        let cluster = launch_replicas(PRIMARIES, 1).await?;
        for node in 0..cluster.nodes().len() {
            cluster
                .cli(
                    node,
                    &["CONFIG", "SET", "cluster-node-timeout", FAILOVER_AFTER],
                )
                .await?;
            // Kept in the node's config file, so a restarted node fails over as fast.
            cluster.cli(node, &["CONFIG", "REWRITE"]).await?;
        }
        Self::on(cluster, Flavour::Plain, true).await
    }

    async fn on(cluster: RedisCluster, flavour: Flavour, per_node: bool) -> Result<Self, BoxError> {
        let url = format!("{}?{}", cluster.url(), flavour.params());
        let inspector = connect(RedisConfig::from_url(&url)?).await?;
        Ok(ClusterHarness {
            cluster,
            flavour,
            url,
            inspector,
            per_node,
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
        self.flavour.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.flavour.capabilities()
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        connect(RedisConfig::from_url(&self.url)?).await
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        let url = with_param(&self.url, &state_ttl_param(state_ttl));
        connect(RedisConfig::from_url(&url)?).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let mut proxies = Vec::new();
        for node in self.cluster.nodes() {
            proxies.push(FaultProxy::start(node.addr()).await?);
        }
        let seeds: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        let (seeds, params) = (seeds.join(","), self.flavour.params());
        let mut config = RedisConfig::from_url(&format!("redis+cluster://{seeds}/?{params}"))?;
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
        Ok(Arc::new(Self::launch(self.flavour).await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        Some(&self.cluster as &dyn Launched)
    }

    fn launched_all(&self) -> Vec<&dyn Launched> {
        match self.per_node {
            true => self
                .cluster
                .nodes()
                .iter()
                .map(|n| n as &dyn Launched)
                .collect(),
            false => self.launched().into_iter().collect(),
        }
    }

    fn lock_url(&self) -> Option<String> {
        Some(format!("{}&namespace={NAMESPACE}", self.url))
    }
}
