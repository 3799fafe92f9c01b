//! The clustered trials' harnesses: a 3-member etcd (`etcd_cluster::chaos`)
//! and a 3-server ZooKeeper ensemble (`zk_ensemble::chaos`), natively with
//! their peer traffic through the testkit's peer links (so one member can be
//! cut off on loopback), or each member in a container with
//! `DISTLOCK_LAUNCHER=docker`.
//!
//! Every client the harness hands out talks to one member, round robin, so
//! that a partition of "the holder's member" puts that holder on the cut
//! member's side; the paused holder and the inspector are given every member.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_testkit::harness::{Cluster, FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::Launched;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Members per cluster.
pub const MEMBERS: usize = 3;

/// The chaos trials need clients and faulty clients only.
const HOOKS: Hooks = Hooks {
    delete_lock: false,
    faulty_client: true,
    restart: false,
    residue: false,
};

/// Which member each handed-out client talks to, in hand-out order.
#[derive(Debug, Default)]
struct Pins {
    next: AtomicUsize,
    members: Mutex<Vec<usize>>,
}

impl Pins {
    /// The member the next client talks to.
    fn next(&self) -> usize {
        let member = self.next.fetch_add(1, Ordering::Relaxed) % MEMBERS;
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(member);
        member
    }

    fn of(&self, n: usize) -> Option<usize> {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(n)
            .copied()
    }
}

/// Runs a launcher whose future is not `Send` (its retry helper takes an
/// async closure) on a blocking thread of the current runtime, since harness
/// futures must be `Send`; the servers' background tasks stay on this runtime.
async fn launch<T: Send + 'static, E: Into<BoxError> + Send + 'static>(
    start: impl AsyncFnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(start()))
        .await?
        .map_err(Into::into)
}

#[cfg(feature = "etcd")]
pub use etcd::EtcdClusterHarness;

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use distlock_core::toolkit::Timeouts;
    use distlock_etcd::EtcdConfig;
    use distlock_testkit::servers::EtcdCluster;

    const NAMESPACE: &str = "distlock-chaos/";

    /// A 3-member etcd cluster.
    #[derive(Debug)]
    pub struct EtcdClusterHarness {
        cluster: EtcdCluster,
        pins: Pins,
        inspector: DynLock,
    }

    impl EtcdClusterHarness {
        /// Starts the cluster and waits for its leader.
        pub async fn launch() -> Result<Self, BoxError> {
            let cluster = launch(async || EtcdCluster::start_partitionable(MEMBERS).await).await?;
            cluster.wait_for_leader(Duration::from_secs(20)).await?;
            let inspector = Arc::new(
                config(
                    &cluster
                        .members()
                        .iter()
                        .map(|m| m.addr())
                        .collect::<Vec<_>>(),
                )
                .connect()
                .await?,
            );
            Ok(EtcdClusterHarness {
                cluster,
                pins: Pins::default(),
                inspector,
            })
        }

        fn member_addr(&self, member: usize) -> SocketAddr {
            self.cluster.members()[member].addr()
        }
    }

    /// A client of `addrs`: replies within 2 s, as the single server's faulty
    /// clients, so a request to a cut-off member gives up rather than hangs.
    fn config(addrs: &[SocketAddr]) -> EtcdConfig {
        EtcdConfig::new(addrs.iter().map(ToString::to_string))
            .namespace(NAMESPACE)
            .timeouts(Timeouts::new(
                Duration::from_secs(5),
                Duration::from_secs(2),
            ))
    }

    #[async_trait]
    impl Harness for EtcdClusterHarness {
        fn name(&self) -> &str {
            "etcd_cluster"
        }

        fn capabilities(&self) -> Capabilities {
            self.inspector.capabilities()
        }

        fn hooks(&self) -> Hooks {
            HOOKS
        }

        async fn client(&self) -> Result<DynLock, BoxError> {
            let addr = self.member_addr(self.pins.next());
            Ok(Arc::new(config(&[addr]).connect().await?))
        }

        async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
            let proxy = Arc::new(FaultProxy::start(self.member_addr(self.pins.next())).await?);
            let lock = config(&[proxy.addr()]).connect().await?;
            Ok(FaultyClient::new(Arc::new(lock), proxy))
        }

        async fn inspector(&self) -> Result<DynLock, BoxError> {
            Ok(self.inspector.clone())
        }

        fn launched_all(&self) -> Vec<&dyn Launched> {
            self.cluster
                .members()
                .iter()
                .map(|m| m as &dyn Launched)
                .collect()
        }

        fn cluster(&self) -> Option<&dyn Cluster> {
            Some(self)
        }

        fn lock_url(&self) -> Option<String> {
            let hosts: Vec<String> = (0..MEMBERS)
                .map(|m| self.member_addr(m).to_string())
                .collect();
            Some(format!("etcd://{}/{NAMESPACE}", hosts.join(",")))
        }

        fn server_logs(&self) -> String {
            self.cluster
                .members()
                .iter()
                .map(|m| format!("--- etcd {}:\n{}", m.name(), m.log_tail(20)))
                .collect::<Vec<_>>()
                .join("\n")
        }
    }

    #[async_trait]
    impl Cluster for EtcdClusterHarness {
        async fn leader(&self) -> Option<usize> {
            self.cluster.leader().await
        }

        fn member_of_client(&self, n: usize) -> Option<usize> {
            self.pins.of(n)
        }

        fn partition(&self, member: usize) -> Result<(), BoxError> {
            Ok(self.cluster.partition(member)?)
        }

        fn heal(&self, member: usize) -> Result<(), BoxError> {
            Ok(self.cluster.heal(member)?)
        }
    }
}

#[cfg(feature = "zookeeper")]
pub use zookeeper::ZkEnsembleHarness;

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use distlock_testkit::servers::zookeeper::Mode;
    use distlock_testkit::servers::{ZooKeeperEnsemble, ZooKeeperOptions};
    use distlock_zookeeper::{ZkBackend, ZkConfig};

    const NAMESPACE: &str = "distlock-chaos";

    /// The ensemble's shortest ttl: a session must outlive an election, as in
    /// the topologies' ensemble cases.
    const MIN_TTL: Duration = Duration::from_secs(2);

    /// A 3-server ZooKeeper ensemble.
    #[derive(Debug)]
    pub struct ZkEnsembleHarness {
        ensemble: ZooKeeperEnsemble,
        pins: Pins,
        inspector: DynLock,
    }

    impl ZkEnsembleHarness {
        /// Starts the ensemble and waits until every server serves.
        pub async fn launch() -> Result<Self, BoxError> {
            let ensemble = launch(async || {
                ZooKeeperEnsemble::start_partitionable(MEMBERS, &ZooKeeperOptions::default()).await
            })
            .await?;
            let all: Vec<usize> = (0..MEMBERS).collect();
            let inspector = Arc::new(config(&ensemble, &all).connect().await?);
            Ok(ZkEnsembleHarness {
                ensemble,
                pins: Pins::default(),
                inspector,
            })
        }
    }

    fn config(ensemble: &ZooKeeperEnsemble, members: &[usize]) -> ZkConfig {
        let endpoints = members
            .iter()
            .filter_map(|m| ensemble.addr(*m))
            .map(|addr| addr.to_string());
        ZkConfig::new(endpoints).namespace(NAMESPACE)
    }

    #[async_trait]
    impl Harness for ZkEnsembleHarness {
        fn name(&self) -> &str {
            "zk_ensemble"
        }

        fn capabilities(&self) -> Capabilities {
            ZkBackend::capabilities_with_min_ttl(MIN_TTL)
        }

        fn hooks(&self) -> Hooks {
            HOOKS
        }

        async fn client(&self) -> Result<DynLock, BoxError> {
            let member = self.pins.next();
            Ok(Arc::new(config(&self.ensemble, &[member]).connect().await?))
        }

        async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
            let member = self.pins.next();
            let addr = self.ensemble.addr(member).ok_or("no such member")?;
            let proxy = Arc::new(FaultProxy::start(addr).await?);
            let config = ZkConfig {
                endpoints: vec![proxy.addr().to_string()],
                ..config(&self.ensemble, &[member])
            };
            Ok(FaultyClient::new(Arc::new(config.connect().await?), proxy))
        }

        async fn inspector(&self) -> Result<DynLock, BoxError> {
            Ok(self.inspector.clone())
        }

        fn launched_all(&self) -> Vec<&dyn Launched> {
            self.ensemble
                .members()
                .iter()
                .map(|m| m as &dyn Launched)
                .collect()
        }

        fn cluster(&self) -> Option<&dyn Cluster> {
            Some(self)
        }

        fn lock_url(&self) -> Option<String> {
            let all: Vec<usize> = (0..MEMBERS).collect();
            Some(format!(
                "zk://{}?namespace={NAMESPACE}",
                self.ensemble.connect_string(&all)
            ))
        }

        fn server_logs(&self) -> String {
            self.ensemble
                .members()
                .iter()
                .map(|m| format!("--- zookeeper {}:\n{}", m.addr(), m.log_tail(20)))
                .collect::<Vec<_>>()
                .join("\n")
        }
    }

    #[async_trait]
    impl Cluster for ZkEnsembleHarness {
        async fn leader(&self) -> Option<usize> {
            for member in 0..MEMBERS {
                if self.ensemble.mode(member).await == Mode::Leader {
                    return Some(member);
                }
            }
            None
        }

        fn member_of_client(&self, n: usize) -> Option<usize> {
            self.pins.of(n)
        }

        fn partition(&self, member: usize) -> Result<(), BoxError> {
            Ok(self.ensemble.partition(member)?)
        }

        fn heal(&self, member: usize) -> Result<(), BoxError> {
            Ok(self.ensemble.heal(member)?)
        }
    }
}
