//! The session-held lock strategies of both SQL adapters, written once:
//! MySQL's `for_update` (a row lock in an open transaction) and PostgreSQL's
//! `advisory` (a session advisory lock), each a lock that lives exactly as
//! long as one server session on a connection of its own. Not a stable API.
//!
//! [`HeldLock`] is their one `Backend` (the handle, [`HeldSession`], keeps
//! others out until its ttl when abandoned) over [`SessionLock`], what each
//! database does its own way: how the lock is taken (InnoDB's row queue, a
//! polled advisory lock), its keepalive and release statements, what
//! "released" means, how an abandoned session ends.
//!
//! A keepalive runs in a task of its own that owns the connection until the
//! reply is in. A renewal is dropped mid-statement when its lease is released
//! or its deadline passes; dropped there, it would leave its reply on the wire
//! for the next statement to read as its own. The next statement waits for the
//! connection instead. (The chaos run saw a release's `ROLLBACK` read the
//! reply of a keepalive dropped mid-statement, and sqlx panic decoding it.)

use crate::db_error::DbError;
use crate::pool::{BoxFuture, Conn, Pool, PoolDialect, Statement};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::toolkit::Inspect;
use distlock_core::{Capabilities, LockError};
use sqlx::{Database, Executor, IntoArguments};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// What one database's session-held strategy gives [`HeldLock`].
#[async_trait]
pub trait SessionLock: fmt::Debug + Sized + Send + Sync + 'static {
    /// The adapter's pool dialect.
    type Dialect: PoolDialect;
    /// What a held lock keeps besides its connection: what its release names.
    type Held: fmt::Debug + Send + Sync + 'static;

    /// What the strategy guarantees.
    fn capabilities(&self) -> Capabilities;
    /// The connections locks are held on, one per held or waiting lock.
    fn holders(&self) -> &Pool<Self::Dialect>;
    /// Takes the lock on a connection of its own ([`holder_connection`]),
    /// waiting per `req.wait`, then `req.not_acquired()`. Cancel-safe: a
    /// session that may hold the lock when the future is dropped is ended.
    async fn take(&self, req: &AcquireRequest<'_>) -> Result<Taken<Self>, LockError>;
    /// The keepalive for a lease of `ttl`: a round trip on the held
    /// connection that keeps the server from ending the session as idle, and
    /// proves the session, and so the lock, alive.
    fn keepalive(&self, ttl: Duration) -> Statement<Db<Self>>;
    /// The statement that gives the lock back.
    fn release(&self, held: &Self::Held) -> Statement<Db<Self>>;
    /// Whether the release's rows prove that the session held the lock and
    /// now holds nothing, so the connection may go back to the pool. By
    /// default the statement's success proves it.
    fn released(_rows: &[<Db<Self> as Database>::Row]) -> bool {
        true
    }
    /// Ends an abandoned holder's session once its ttl is over. By default
    /// the connection is closed (it may hold the lock, so the pool never takes
    /// it back), which ends the session and the lock.
    fn end_abandoned(conn: Conn<Self::Dialect>) -> BoxFuture<'static, ()> {
        Box::pin(async move { drop(conn) })
    }
    /// Inspection of the strategy's locks.
    fn inspect(&self) -> &dyn Inspect;
}

/// A lock [`SessionLock::take`] won, its handle built with [`HeldSession::new`].
pub type Taken<A> = Acquired<HeldSession<A>>;

/// The database of `A`.
pub type Db<A> = <<A as SessionLock>::Dialect as PoolDialect>::Database;

/// A connection of `holders`, unless the wait ends first.
pub async fn holder_connection<D: PoolDialect>(
    holders: &Pool<D>,
    req: &AcquireRequest<'_>,
) -> Result<Conn<D>, LockError>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    tokio::select! {
        biased;
        conn = holders.get() => conn.map_err(|e| holders.error(e)),
        _ = req.wait.reached(), if req.wait != WaitUntil::No => Err(req.not_acquired()),
    }
}

/// The `Backend` of a session-held strategy.
#[derive(Debug)]
pub struct HeldLock<A>(pub A);

#[async_trait]
impl<A: SessionLock> Backend for HeldLock<A>
where
    for<'c> &'c mut <Db<A> as Database>::Connection: Executor<'c, Database = Db<A>>,
    <Db<A> as Database>::Arguments: IntoArguments<Db<A>>,
{
    type Handle = HeldSession<A>;

    fn name(&self) -> &'static str {
        <A::Dialect as PoolDialect>::TEXTS.backend
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Taken<A>, LockError> {
        self.0.take(&req).await
    }

    async fn renew(&self, session: &HeldSession<A>, ttl: Duration) -> Result<Ownership, LockError> {
        let slot = session.slot.clone().lock_owned().await;
        let error = |e| self.0.holders().error(e);
        match tokio::spawn(keepalive_on(slot, self.0.keepalive(ttl))).await {
            Ok(Some(ownership)) => Ok(ownership),
            Ok(None) => Err(error(unreachable())),
            Err(e) => Err(error(DbError::Protocol(format!("keepalive task: {e}")))),
        }
    }

    /// Runs the release statement on the connection, which goes back to the
    /// pool when [`SessionLock::released`] confirms, from its rows, that the
    /// session now holds nothing.
    async fn release(&self, session: &HeldSession<A>) -> Result<Ownership, LockError> {
        let mut slot = session.slot.lock().await;
        let mut conn = match std::mem::replace(&mut *slot, Slot::Ended) {
            Slot::Holding(conn) => conn,
            Slot::Unreachable => return Err(self.0.holders().error(unreachable())),
            Slot::Ended => return Ok(Ownership::NotHeld),
        };
        match conn.fetch_all(self.0.release(&session.held)).await {
            Ok(rows) if A::released(&rows) => {
                conn.holds_nothing();
                Ok(Ownership::Held)
            }
            Ok(_) => Ok(Ownership::NotHeld),
            Err(DbError::TimedOut(_)) => Err(self.0.holders().error(unreachable())),
            Err(_) => Ok(Ownership::NotHeld),
        }
    }

    fn abandoned(&self, session: &HeldSession<A>) {
        session.abandon();
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self.0.inspect())
    }
}

/// What a held lock keeps: the connection whose session holds it (shared
/// with a keepalive in flight), what its release names, and its ttl.
pub struct HeldSession<A: SessionLock> {
    slot: Arc<Mutex<Slot<A::Dialect>>>,
    held: A::Held,
    /// The ttl it was acquired with: how long an abandoned session is kept.
    ttl: Duration,
}

/// The held connection, or why there is none.
#[derive(Debug)]
enum Slot<D: PoolDialect> {
    Holding(Conn<D>),
    /// A keepalive got no reply: the connection was dropped, but whether the
    /// server still holds the lock is unknown until its idle timeout ends it.
    Unreachable,
    Ended,
}

impl<A: SessionLock> std::fmt::Debug for HeldSession<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = &self.held;
        f.debug_struct("HeldSession")
            .field("held", held)
            .finish_non_exhaustive()
    }
}

impl<A: SessionLock> HeldSession<A> {
    /// `conn`, whose session now holds the lock `held`, acquired for `ttl`.
    pub fn new(conn: Conn<A::Dialect>, held: A::Held, ttl: Duration) -> Self {
        let slot = Arc::new(Mutex::new(Slot::Holding(conn)));
        HeldSession { slot, held, ttl }
    }

    /// The lease was dropped without release: it must keep others out until
    /// its ttl, as on every backend, but ending the session would give the
    /// lock back at once. So the connection is kept, idle, for the ttl, and
    /// then handed to [`SessionLock::end_abandoned`]. A keepalive or release
    /// in flight owns the connection and closes it when it ends; a crashed
    /// process closes it at once: the lock is session-bound.
    fn abandon(&self) {
        let Ok(mut slot) = self.slot.try_lock() else {
            return;
        };
        let Slot::Holding(conn) = std::mem::replace(&mut *slot, Slot::Ended) else {
            return;
        };
        // With no runtime the connection is simply closed, which ends the
        // session and its lock at once.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let ttl = self.ttl;
            runtime.spawn(async move {
                tokio::time::sleep(ttl).await;
                A::end_abandoned(conn).await;
            });
        }
    }
}

impl<A: SessionLock> Drop for HeldSession<A> {
    /// Dropped without release is abandoned; after a release (or an earlier
    /// abandon) nothing is left to do.
    fn drop(&mut self) {
        self.abandon();
    }
}

/// The error once the held connection stopped answering: whether the lock is
/// still held is unknown.
fn unreachable() -> DbError {
    DbError::Protocol("the connection holding the lock stopped answering".into())
}

async fn keepalive_on<D: PoolDialect>(
    mut slot: OwnedMutexGuard<Slot<D>>,
    statement: Statement<D::Database>,
) -> Option<Ownership>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    let conn = match &mut *slot {
        Slot::Holding(conn) => conn,
        Slot::Unreachable => return None,
        Slot::Ended => return Some(Ownership::NotHeld),
    };
    match conn.execute(statement).await {
        Ok(_) => Some(Ownership::Held),
        Err(DbError::TimedOut(_)) => {
            *slot = Slot::Unreachable;
            None
        }
        // The session is gone (killed, terminated, idle timeout, server
        // restarted): so is the lock.
        Err(e) => {
            tracing::debug!(error = %e, "keepalive failed: the holder session ended");
            *slot = Slot::Ended;
            Some(Ownership::NotHeld)
        }
    }
}
