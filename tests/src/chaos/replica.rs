//! `postgres_replica::chaos` and `mysql_replica::chaos`: `version_cas` on a
//! primary with an asynchronous replica, both launched natively with
//! Debian's packages alone (PostgreSQL streaming replication from
//! `pg_basebackup -R`; MariaDB binlog replication). The fault is a failover:
//! the primary killed, the replica promoted, the clients' address moved to it
//! (as a virtual IP or a DNS name is), a new replica started from it. The
//! adapters claim `Strict` fencing on ONE server; what the replica had not
//! received when the primary died is lost, so overlaps and token order are
//! measured here, and the fence (no stale write admitted) and `lost()` are
//! still required. The replica reaches its primary through a relay (a fault
//! proxy): in `<backend>_replica::lagging` it holds every byte back [`LAG`],
//! so the replica is that far behind when the primary dies, and what the
//! relay still held dies with it.

use super::Spec;
use crate::sql::{SqlBackend, table};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock, FencingGuarantee};
use distlock_testkit::chaos::{FaultKind, Requirement};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::harness::{Failover, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{Launched, ServerError};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// The one fault of these trials, so that it explains whatever the history shows.
pub const FAILOVER: &[FaultKind] = &[FaultKind::Failover];
/// How far behind the lagging trials' replicas run: half the ttl, so that
/// a grant, renewal or release of the last half ttl before a kill is lost.
pub const LAG: Duration = Duration::from_millis(500);

/// A server that can be a primary with an asynchronous replica.
pub trait Replicated: Launched + Send + Sync + Sized + 'static {
    /// A primary.
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>>;
    /// A new replica of this server, which it reaches at `via`, replicating.
    fn start_replica(&self, via: SocketAddr) -> impl Future<Output = Result<Self, ServerError>>;
    /// Makes this replica a primary.
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>>;
    /// Where the server reaches a relay of the test process.
    fn test_host(&self) -> IpAddr;
}

#[cfg(feature = "postgres")]
impl Replicated for distlock_testkit::servers::PostgresServer {
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_primary()
    }
    fn start_replica(&self, via: SocketAddr) -> impl Future<Output = Result<Self, ServerError>> {
        self.start_standby(via)
    }
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>> {
        Self::promote(self)
    }
    fn test_host(&self) -> IpAddr {
        Self::test_host(self)
    }
}

#[cfg(feature = "mysql")]
impl Replicated for distlock_testkit::servers::MariaDbServer {
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_primary()
    }
    fn start_replica(&self, via: SocketAddr) -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_replica(self, via)
    }
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>> {
        Self::promote(self)
    }
    fn test_host(&self) -> IpAddr {
        Self::test_host(self)
    }
}

/// `postgres_replica::chaos`, or with the replica lagging [`LAG`] behind,
/// `postgres_replica::lagging`.
#[cfg(feature = "postgres")]
pub fn postgres(lagging: bool) -> Spec {
    let trials = ["postgres_replica::chaos", "postgres_replica::lagging"];
    spec::<crate::postgres::Postgres>(trials, lagging)
}

/// `mysql_replica::chaos`, or with the replica lagging [`LAG`] behind,
/// `mysql_replica::lagging`.
#[cfg(feature = "mysql")]
pub fn mysql(lagging: bool) -> Spec {
    spec::<crate::mysql::MySql>(["mysql_replica::chaos", "mysql_replica::lagging"], lagging)
}

/// `B`'s replica trial (named `trials[0]`, or `trials[1]` when `lagging`) on
/// the first strategy of its suites, `version_cas`.
fn spec<B: SqlBackend>(trials: [&'static str; 2], lagging: bool) -> Spec
where
    B::Server: Replicated,
{
    fn start<B: SqlBackend>(lag: Option<Duration>) -> super::StartFuture
    where
        B::Server: Replicated,
    {
        Box::pin(async move {
            let strategy = B::SUITES[0].0;
            Ok(Arc::new(ReplicaHarness::<B>::launch(strategy, lag).await?) as _)
        })
    }
    Spec {
        trial: trials[usize::from(lagging)],
        backend: B::NAME,
        start: if lagging {
            || start::<B>(Some(LAG))
        } else {
            || start::<B>(None)
        },
        faults: FAILOVER,
        exclusion: Requirement::Measured,
    }
}

/// The primary and its replica; `generation` counts the failovers.
#[derive(Debug)]
struct Pair<S> {
    primary: Arc<S>,
    replica: Arc<S>,
    generation: usize,
}

/// A primary with a replica behind one address (a relay the failover
/// retargets); the replica follows through another relay, `link`.
#[derive(Debug)]
pub struct ReplicaHarness<B: SqlBackend> {
    strategy: B::Strategy,
    front: FaultProxy,
    /// The replica's way to its primary: delayed by `lag`, if any.
    link: FaultProxy,
    lag: Option<Duration>,
    /// The test user's URL (the same on both: the replica takes the password).
    url: String,
    pair: Mutex<Pair<B::Server>>,
    inspector: DynLock,
}

impl<B: SqlBackend> ReplicaHarness<B>
where
    B::Server: Replicated,
{
    /// A primary, its replica (lagging `lag` behind, if given) and the
    /// address in front of the primary.
    pub async fn launch(strategy: B::Strategy, lag: Option<Duration>) -> Result<Self, BoxError> {
        let primary = blocking(B::Server::start_primary).await?;
        let link = FaultProxy::start_on(primary.test_host(), B::addr(&primary)).await?;
        let primary = Arc::new(primary);
        let replica = start_replica(&primary, &link, lag).await?;
        let front = FaultProxy::start(B::addr(&primary)).await?;
        let url = B::url(&primary);
        let inspector = connect::<B>(&url, &front, strategy).await?;
        Ok(ReplicaHarness {
            strategy,
            front,
            link,
            lag,
            url,
            pair: Mutex::new(Pair {
                primary,
                replica: Arc::new(replica),
                generation: 0,
            }),
            inspector,
        })
    }
}

/// A new replica of `primary` through `link`, which then holds every byte
/// back `lag` (the copy itself is not delayed).
async fn start_replica<S: Replicated>(
    primary: &Arc<S>,
    link: &FaultProxy,
    lag: Option<Duration>,
) -> Result<S, BoxError> {
    link.set_fault(Fault::None).await;
    let (primary, via) = (primary.clone(), link.addr());
    let replica = blocking(move || async move { primary.start_replica(via).await }).await?;
    if let Some(lag) = lag {
        link.set_fault(Fault::Delay(lag)).await;
    }
    Ok(replica)
}

/// Runs `work` on a blocking thread of this runtime: the launchers' futures
/// are not `Send`, and harness futures must be.
async fn blocking<T, F>(work: impl FnOnce() -> F + Send + 'static) -> Result<T, BoxError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, ServerError>>,
{
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(work())).await??)
}

/// A client through the front address.
async fn connect<B: SqlBackend>(
    url: &str,
    front: &FaultProxy,
    strategy: B::Strategy,
) -> Result<DynLock, BoxError> {
    let port = Some(front.addr().port());
    B::connect(url, port, table::<B>(strategy), strategy, None).await
}

#[async_trait]
impl<B: SqlBackend> Failover for ReplicaHarness<B>
where
    B::Server: Replicated,
{
    async fn fail_over(&self) -> Result<String, BoxError> {
        let mut pair = self.pair.lock().await;
        pair.primary.process().kill();
        // What the link still holds back dies with the primary, as the
        // bytes a primary had not sent yet do. (Reset after the kill: a
        // commit made in between would be lost to the reset, not the lag.)
        self.link.set_fault(Fault::Reset).await;
        let promoted = pair.replica.clone();
        blocking(move || async move { promoted.promote().await }).await?;
        // Meanwhile the clients' connections were refused, as during any
        // failover; now the address moves.
        self.front.retarget(B::addr(&pair.replica));
        // A new replica of the promoted one, so the next failover has one.
        self.link.retarget(B::addr(&pair.replica));
        let replica = start_replica(&pair.replica, &self.link, self.lag).await?;
        pair.primary = std::mem::replace(&mut pair.replica, Arc::new(replica));
        pair.generation += 1;
        Ok(format!("primary{}", pair.generation))
    }
}

#[async_trait]
impl<B: SqlBackend> Harness for ReplicaHarness<B>
where
    B::Server: Replicated,
{
    fn name(&self) -> &str {
        "replica"
    }

    fn capabilities(&self) -> Capabilities {
        // Strict on one server; a promoted asynchronous replica is outside it.
        B::capabilities(self.strategy).fencing(FencingGuarantee::UnderTimingAssumptions)
    }

    fn hooks(&self) -> Hooks {
        Hooks::default()
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        connect::<B>(&self.url, &self.front, self.strategy).await
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    fn failover(&self) -> Option<&dyn Failover> {
        Some(self)
    }

    fn server_logs(&self) -> String {
        match self.pair.try_lock() {
            Ok(pair) => format!(
                "[primary]\n{}\n[replica]\n{}",
                pair.primary.log_tail(20),
                pair.replica.log_tail(20)
            ),
            Err(_) => "(a failover is under way)".into(),
        }
    }
}
