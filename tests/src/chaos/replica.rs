//! `postgres_replica::chaos` and `mysql_replica::chaos`: `version_cas` on a
//! primary with an asynchronous replica, both launched natively with
//! Debian's packages alone (PostgreSQL streaming replication from
//! `pg_basebackup -R`; MariaDB binlog replication). The fault is a failover:
//! the primary killed, the replica promoted, the clients' address moved to it
//! (as a virtual IP or a DNS name is), a new replica started from it. The
//! adapters claim `Strict` fencing on ONE server; what the replica had not
//! received when the primary died is lost, so overlaps and token order are
//! measured here, and the fence (no stale write admitted) and `lost()` are
//! still required.

use super::Spec;
use crate::sql::{SqlBackend, table};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock, FencingGuarantee};
use distlock_testkit::chaos::{FaultKind, Requirement};
use distlock_testkit::harness::{Failover, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{Launched, ServerError};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The one fault of these trials, so that it explains whatever the history shows.
pub const FAILOVER: &[FaultKind] = &[FaultKind::Failover];

/// A server that can be a primary with an asynchronous replica.
pub trait Replicated: Launched + Send + Sync + Sized + 'static {
    /// A primary, natively.
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>>;
    /// A new replica of this server, replicating.
    fn start_replica(&self) -> impl Future<Output = Result<Self, ServerError>>;
    /// Makes this replica a primary.
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>>;
}

#[cfg(feature = "postgres")]
impl Replicated for distlock_testkit::servers::PostgresServer {
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_primary()
    }
    fn start_replica(&self) -> impl Future<Output = Result<Self, ServerError>> {
        self.start_standby()
    }
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>> {
        Self::promote(self)
    }
}

#[cfg(feature = "mysql")]
impl Replicated for distlock_testkit::servers::MariaDbServer {
    fn start_primary() -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_primary()
    }
    fn start_replica(&self) -> impl Future<Output = Result<Self, ServerError>> {
        Self::start_replica(self)
    }
    fn promote(&self) -> impl Future<Output = Result<(), ServerError>> {
        Self::promote(self)
    }
}

/// `postgres_replica::chaos`.
#[cfg(feature = "postgres")]
pub fn postgres() -> Spec {
    use crate::postgres::Postgres;
    use distlock_postgres::Strategy;
    Spec {
        trial: "postgres_replica::chaos",
        backend: "postgres",
        start: || {
            Box::pin(async {
                Ok(Arc::new(ReplicaHarness::<Postgres>::launch(Strategy::VersionCas).await?) as _)
            })
        },
        faults: FAILOVER,
        exclusion: Requirement::Measured,
    }
}

/// `mysql_replica::chaos`.
#[cfg(feature = "mysql")]
pub fn mysql() -> Spec {
    use crate::mysql::MySql;
    use distlock_mysql::Strategy;
    Spec {
        trial: "mysql_replica::chaos",
        backend: "mysql",
        start: || {
            Box::pin(async {
                Ok(Arc::new(ReplicaHarness::<MySql>::launch(Strategy::VersionCas).await?) as _)
            })
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
/// retargets).
#[derive(Debug)]
pub struct ReplicaHarness<B: SqlBackend> {
    strategy: B::Strategy,
    front: FaultProxy,
    /// The test user's URL (the same on both: the replica takes the password).
    url: String,
    pair: Mutex<Pair<B::Server>>,
    inspector: DynLock,
}

impl<B: SqlBackend> ReplicaHarness<B>
where
    B::Server: Replicated,
{
    /// A primary, its replica and the address in front of the primary.
    pub async fn launch(strategy: B::Strategy) -> Result<Self, BoxError> {
        let (primary, replica) = blocking(|| async {
            let primary = B::Server::start_primary().await?;
            let replica = primary.start_replica().await?;
            Ok((primary, replica))
        })
        .await?;
        let front = FaultProxy::start(B::addr(&primary)).await?;
        let url = B::url(&primary);
        let inspector = connect::<B>(&url, &front, strategy).await?;
        Ok(ReplicaHarness {
            strategy,
            front,
            url,
            pair: Mutex::new(Pair {
                primary: Arc::new(primary),
                replica: Arc::new(replica),
                generation: 0,
            }),
            inspector,
        })
    }
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
        let promoted = pair.replica.clone();
        blocking(move || async move { promoted.promote().await }).await?;
        // Meanwhile the clients' connections were refused, as during any
        // failover; now the address moves.
        self.front.retarget(B::addr(&pair.replica));
        // A new replica of the promoted one, so the next failover has one.
        let promoted = pair.replica.clone();
        let replica = blocking(move || async move { promoted.start_replica().await }).await?;
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
