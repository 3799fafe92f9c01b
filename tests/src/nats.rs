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

pub mod cluster {
    //! A 3-server JetStream cluster (Debian's nats-server 2.9.10), each server in
    //! its own container, with a bucket of one replica: the only safe choice
    //! before 2.9.21, where a replicated bucket is refused. The bucket's stream
    //! lives on one server, its leader; the other two only route to it.
    //!
    //! Killing a server the stream does not live on disturbs neither a holder nor
    //! a waiter. Killing the stream's server makes the lock unavailable (no grant,
    //! no takeover), and once it restarts from its file store the lock is granted
    //! again with a higher token.

    use crate::topologies::{Case, Topology, check_history, key, spawn_waiter};
    use distlock_core::{AcquireOptions, BoxError, DistributedLock, LockError, Wait};
    use distlock_nats::{NatsConfig, NatsLock};
    use distlock_testkit::history::History;
    use distlock_testkit::servers::NatsCluster;
    use std::time::{Duration, Instant};

    const TTL: Duration = Duration::from_secs(2);
    const BUCKET: &str = "topology";
    const STREAM: &str = "KV_topology";

    /// `nats_cluster::<case>`.
    pub fn topologies() -> Vec<Topology> {
        vec![("nats_cluster", cases())]
    }

    fn cases() -> Vec<Case> {
        vec![
            ("other_server_killed_disturbs_no_one", || {
                Box::pin(other_server_killed_disturbs_no_one())
            }),
            ("stream_server_killed_then_restarted", || {
                Box::pin(stream_server_killed_then_restarted())
            }),
            ("cut_off_holder_loses_first", || {
                Box::pin(cut_off_holder_loses_first())
            }),
        ]
    }

    /// The cluster, its R1 bucket created, and the index of the server it lives on.
    async fn cluster() -> Result<(NatsCluster, usize), BoxError> {
        let nats = NatsCluster::start(3).await?;
        connect(&nats, |_| true).await?;
        let leader = nats
            .stream_leader(STREAM)
            .await
            .ok_or("the bucket's stream has no leader")?;
        Ok((nats, leader))
    }

    /// A client of the servers `which` selects.
    async fn connect(
        nats: &NatsCluster,
        which: impl Fn(usize) -> bool,
    ) -> Result<NatsLock, BoxError> {
        let servers = (0..nats.servers().len())
            .filter(|index| which(*index))
            .map(|index| nats.servers()[index].addr().to_string());
        Ok(NatsConfig::new(servers).bucket(BUCKET).connect().await?)
    }

    /// A server that is not the stream's is killed while a lock is held and a
    /// waiter waits (both clients of the two other servers): for three ttls the
    /// holder keeps the lock and the waiter gets nothing; on the release the
    /// waiter is granted it at once, with a higher token.
    async fn other_server_killed_disturbs_no_one() -> Result<(), BoxError> {
        let (nats, leader) = cluster().await?;
        let other = (leader + 1) % 3;
        let holder = connect(&nats, |index| index != other).await?;
        let waiter = connect(&nats, |index| index != other).await?;
        let key = key("other-killed")?;
        let lease = holder
            .acquire(&key, &AcquireOptions::new().ttl(TTL))
            .await?;
        let options = AcquireOptions::new()
            .ttl(TTL)
            .wait(Wait::For(Duration::from_secs(60)));
        let waiting = spawn_waiter(waiter, key.clone(), options, Duration::ZERO);
        nats.servers()[other].kill();
        let killed = Instant::now();
        while killed.elapsed() < TTL * 3 {
            if !lease.is_held() {
                return Err("the holder lost its lease when another server was killed".into());
            }
            if waiting.is_finished() {
                return Err("the waiter stopped waiting while the lock was held".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let token = lease.token();
        lease.release().await?;
        let released = Instant::now();
        let (next, granted) = waiting.await??;
        let after = granted.duration_since(released);
        if next.token() <= token {
            return Err(format!("token {} after {token} did not rise", next.token()).into());
        }
        if after > TTL {
            return Err(format!("the waiter was granted {after:?} after the release").into());
        }
        println!(
            "server {other} killed (stream on {leader}); waiter granted {after:?} after the release"
        );
        next.release().await?;
        Ok(())
    }

    /// The stream's only server is killed under a held lock. The holder cannot
    /// renew: its `lost()` fires; a contender (a client of the two other servers)
    /// is refused as Unavailable, never granted. The server restarts on its file
    /// store: the lock is granted again with a token above every earlier one.
    async fn stream_server_killed_then_restarted() -> Result<(), BoxError> {
        let (nats, leader) = cluster().await?;
        let holder = connect(&nats, |index| index != leader).await?;
        let contender = connect(&nats, |index| index != leader).await?;
        let key = key("stream-killed")?;
        let lease = holder
            .acquire(&key, &AcquireOptions::new().ttl(TTL))
            .await?;
        let token = lease.token();
        nats.servers()[leader].kill();
        let killed = Instant::now();
        tokio::time::timeout(TTL * 3, lease.lost())
            .await
            .map_err(|_| "lost() did not fire with the stream's server down")?;
        let lost_after = killed.elapsed();
        let try_once = AcquireOptions::new().ttl(TTL).wait(Wait::No);
        match contender.try_acquire(&key, &try_once).await {
            Err(LockError::Unavailable { .. }) => {}
            Ok(Some(_)) => return Err("granted with the stream's server down".into()),
            other => return Err(format!("expected Unavailable, got {other:?}").into()),
        }
        nats.servers()[leader].restart().await?;
        // The holder's record is still there, unrenewed: a grant takes over after
        // its ttl, once the restarted server leads the stream again.
        let restarted = Instant::now();
        let next = loop {
            if let Ok(Some(next)) = contender.try_acquire(&key, &try_once).await {
                break next;
            }
            if restarted.elapsed() > Duration::from_secs(60) {
                return Err("no grant within 60 s of the restart".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if next.token() <= token {
            return Err(format!("token {} after {token} did not rise", next.token()).into());
        }
        println!(
            "lost() {lost_after:?} after the kill; token {token} then {} after the restart",
            next.token()
        );
        next.release().await?;
        drop(lease);
        Ok(())
    }

    /// The holder's server (not the stream's) is cut off the network, and the
    /// holder with it: it cannot renew, so its `lost()` fires at its own
    /// deadline, and the waiter (a client of the two other servers) is granted
    /// the lock only after that, with a higher token.
    async fn cut_off_holder_loses_first() -> Result<(), BoxError> {
        let (nats, leader) = cluster().await?;
        let cut = (leader + 1) % 3;
        let holder = connect(&nats, |index| index == cut).await?;
        let waiter = connect(&nats, |index| index != cut).await?;
        let key = key("cut-off")?;
        let history = History::new();
        let lease = holder
            .acquire(&key, &AcquireOptions::new().ttl(TTL))
            .await?;
        let entered = Instant::now();
        let options = AcquireOptions::new()
            .ttl(TTL)
            .wait(Wait::For(Duration::from_secs(30)));
        let waiting = spawn_waiter(waiter, key.clone(), options, Duration::ZERO);
        // Let the waiter see the holder's record before the cut.
        tokio::time::sleep(Duration::from_millis(300)).await;
        nats.servers()[cut].disconnect()?;
        let cut_at = Instant::now();
        let reason = tokio::time::timeout(TTL * 5, lease.lost())
            .await
            .map_err(|_| "lost() did not fire on the cut-off holder")?;
        let lost_after = cut_at.elapsed();
        history.record_lease(0, &lease, entered);
        let (next, granted) = waiting.await??;
        history.record_lease(1, &next, granted);
        nats.servers()[cut].reconnect()?;
        check_history(&history)?;
        let grant_after = granted.duration_since(cut_at);
        if grant_after < lost_after {
            return Err(format!(
                "the waiter was granted {grant_after:?} after the cut, before the holder's \
                 lost() ({lost_after:?})"
            )
            .into());
        }
        println!(
            "lost() ({reason:?}) {lost_after:?} after the cut; next holder {grant_after:?} after it"
        );
        next.release().await?;
        drop(lease);
        Ok(())
    }
}
