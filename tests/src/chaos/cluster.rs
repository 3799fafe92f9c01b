//! The clustered trials' harness: a 3-member etcd (`etcd_cluster::chaos`)
//! and a 3-server ZooKeeper ensemble (`zk_ensemble::chaos`), natively with
//! their peer traffic through the testkit's peer links (so one member can be
//! cut off on loopback), or each member in a container with
//! `DISTLOCK_LAUNCHER=docker`.
//!
//! Every client the harness hands out talks to one member, round robin, so
//! that a partition of "the holder's member" puts that holder on the cut
//! member's side; the paused holder and the inspector are given every member.
//! [`ClusterHarness`] is written once over [`Members`], what each kind of
//! cluster adds: its servers, its leader, its cut, and its client.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_testkit::harness::{Cluster, FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::Launched;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Members per cluster.
pub const MEMBERS: usize = 3;

/// The chaos trials need clients and faulty clients only.
const HOOKS: Hooks = Hooks {
    delete_lock: false,
    faulty_client: true,
    restart: false,
    residue: false,
    holder_process: false,
};

/// A kind of cluster, as its harness uses it.
#[async_trait]
pub trait Members: Send + Sync + Sized + 'static {
    /// The harness's name, `etcd_cluster` or `zk_ensemble`.
    const NAME: &'static str;

    /// Starts `MEMBERS` members, partitionable, and waits until they serve:
    /// not `Send` (the launchers' retry helper takes an async closure).
    fn start() -> Pin<Box<dyn Future<Output = Result<Self, BoxError>>>>;

    /// The members, in index order.
    fn servers(&self) -> Vec<&dyn Launched>;

    /// Member `member`'s client address.
    fn addr(&self, member: usize) -> SocketAddr;

    /// The member that leads now, if one does.
    async fn leader(&self) -> Option<usize>;

    /// Cuts `member` off its peers.
    fn partition(&self, member: usize) -> Result<(), BoxError>;

    /// Ends that partition.
    fn heal(&self, member: usize) -> Result<(), BoxError>;

    /// A client of the members at `addrs`.
    async fn connect(addrs: &[SocketAddr]) -> Result<DynLock, BoxError>;

    /// The URL of a client of `addrs`, for the paused holder.
    fn lock_url(addrs: &[SocketAddr]) -> String;

    /// The capabilities the trial reads its ttl and requirements from.
    fn capabilities(inspector: &DynLock) -> Capabilities {
        inspector.capabilities()
    }
}

/// A cluster of kind `C` and the clients handed out on it.
#[derive(Debug)]
pub struct ClusterHarness<C> {
    cluster: C,
    /// Which member each handed-out client talks to, in hand-out order.
    pins: Mutex<Vec<usize>>,
    next: AtomicUsize,
    inspector: DynLock,
}

impl<C: Members> ClusterHarness<C> {
    /// Starts the cluster; its launcher's future is not `Send` (its retry
    /// helper takes an async closure) and harness futures must be, so it runs
    /// on a blocking thread of this runtime, where the servers' tasks stay.
    pub async fn launch() -> Result<Self, BoxError> {
        let runtime = tokio::runtime::Handle::current();
        let cluster = tokio::task::spawn_blocking(move || runtime.block_on(C::start())).await??;
        let inspector = C::connect(&all(&cluster)).await?;
        Ok(ClusterHarness {
            cluster,
            pins: Mutex::default(),
            next: AtomicUsize::new(0),
            inspector,
        })
    }

    /// The member the next client talks to, remembered in hand-out order.
    fn pin(&self) -> SocketAddr {
        let member = self.next.fetch_add(1, Ordering::Relaxed) % MEMBERS;
        self.pins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(member);
        self.cluster.addr(member)
    }
}

/// Every member's client address.
fn all<C: Members>(cluster: &C) -> Vec<SocketAddr> {
    (0..MEMBERS).map(|m| cluster.addr(m)).collect()
}

#[async_trait]
impl<C: Members + std::fmt::Debug> Harness for ClusterHarness<C> {
    fn name(&self) -> &str {
        C::NAME
    }

    fn capabilities(&self) -> Capabilities {
        C::capabilities(&self.inspector)
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        C::connect(&[self.pin()]).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let proxy = Arc::new(FaultProxy::start(self.pin()).await?);
        let lock = C::connect(&[proxy.addr()]).await?;
        Ok(FaultyClient::new(lock, proxy))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    fn launched_all(&self) -> Vec<&dyn Launched> {
        self.cluster.servers()
    }

    fn cluster(&self) -> Option<&dyn Cluster> {
        Some(self)
    }

    fn lock_url(&self) -> Option<String> {
        Some(C::lock_url(&all(&self.cluster)))
    }

    fn server_logs(&self) -> String {
        let servers = self.cluster.servers();
        let tails = servers.iter().enumerate().map(|(member, server)| {
            format!("--- {} node{member}:\n{}", C::NAME, server.log_tail(20))
        });
        tails.collect::<Vec<_>>().join("\n")
    }
}

#[async_trait]
impl<C: Members> Cluster for ClusterHarness<C> {
    async fn leader(&self) -> Option<usize> {
        self.cluster.leader().await
    }

    fn member_of_client(&self, n: usize) -> Option<usize> {
        let pins = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        pins.get(n).copied()
    }

    fn partition(&self, member: usize) -> Result<(), BoxError> {
        self.cluster.partition(member)
    }

    fn heal(&self, member: usize) -> Result<(), BoxError> {
        self.cluster.heal(member)
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use distlock_core::toolkit::Timeouts;
    use distlock_etcd::EtcdConfig;
    use distlock_testkit::servers::EtcdCluster;
    use std::time::Duration;

    const NAMESPACE: &str = "distlock-chaos/";

    #[async_trait]
    impl Members for EtcdCluster {
        const NAME: &'static str = "etcd_cluster";

        fn start() -> Pin<Box<dyn Future<Output = Result<Self, BoxError>>>> {
            Box::pin(async {
                let cluster = EtcdCluster::start_partitionable(MEMBERS).await?;
                cluster.wait_for_leader(Duration::from_secs(20)).await?;
                Ok(cluster)
            })
        }

        fn servers(&self) -> Vec<&dyn Launched> {
            self.members().iter().map(|m| m as &dyn Launched).collect()
        }

        fn addr(&self, member: usize) -> SocketAddr {
            self.members()[member].addr()
        }

        async fn leader(&self) -> Option<usize> {
            EtcdCluster::leader(self).await
        }

        fn partition(&self, member: usize) -> Result<(), BoxError> {
            Ok(EtcdCluster::partition(self, member)?)
        }

        fn heal(&self, member: usize) -> Result<(), BoxError> {
            Ok(EtcdCluster::heal(self, member)?)
        }

        /// Replies within 2 s, as the single server's faulty clients, so a
        /// request to a cut-off member gives up rather than hangs.
        async fn connect(addrs: &[SocketAddr]) -> Result<DynLock, BoxError> {
            let config = EtcdConfig::new(addrs.iter().map(ToString::to_string))
                .namespace(NAMESPACE)
                .timeouts(Timeouts::new(
                    Duration::from_secs(5),
                    Duration::from_secs(2),
                ));
            Ok(Arc::new(config.connect().await?))
        }

        fn lock_url(addrs: &[SocketAddr]) -> String {
            let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            format!("etcd://{}/{NAMESPACE}", hosts.join(","))
        }
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use distlock_testkit::servers::zookeeper::Mode;
    use distlock_testkit::servers::{ZooKeeperEnsemble, ZooKeeperOptions};
    use distlock_zookeeper::{ZkBackend, ZkConfig};
    use std::time::Duration;

    const NAMESPACE: &str = "distlock-chaos";

    /// The ensemble's shortest ttl: a session must outlive an election, as in
    /// the topologies' ensemble cases.
    const MIN_TTL: Duration = Duration::from_secs(2);

    #[async_trait]
    impl Members for ZooKeeperEnsemble {
        const NAME: &'static str = "zk_ensemble";

        fn start() -> Pin<Box<dyn Future<Output = Result<Self, BoxError>>>> {
            Box::pin(async {
                let options = ZooKeeperOptions::default();
                Ok(ZooKeeperEnsemble::start_partitionable(MEMBERS, &options).await?)
            })
        }

        fn servers(&self) -> Vec<&dyn Launched> {
            self.members().iter().map(|m| m as &dyn Launched).collect()
        }

        fn addr(&self, member: usize) -> SocketAddr {
            self.members()[member].addr()
        }

        async fn leader(&self) -> Option<usize> {
            for member in 0..MEMBERS {
                if self.mode(member).await == Mode::Leader {
                    return Some(member);
                }
            }
            None
        }

        fn partition(&self, member: usize) -> Result<(), BoxError> {
            Ok(ZooKeeperEnsemble::partition(self, member)?)
        }

        fn heal(&self, member: usize) -> Result<(), BoxError> {
            Ok(ZooKeeperEnsemble::heal(self, member)?)
        }

        async fn connect(addrs: &[SocketAddr]) -> Result<DynLock, BoxError> {
            let config = ZkConfig::new(addrs.iter().map(ToString::to_string)).namespace(NAMESPACE);
            Ok(Arc::new(config.connect().await?))
        }

        fn lock_url(addrs: &[SocketAddr]) -> String {
            let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            format!("zk://{}?namespace={NAMESPACE}", hosts.join(","))
        }

        fn capabilities(_: &DynLock) -> Capabilities {
            ZkBackend::capabilities_with_min_ttl(MIN_TTL)
        }
    }
}
