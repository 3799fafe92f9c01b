//! `for_update`: a dedicated connection holds an open transaction with an
//! exclusive lock on the lock's row, taken by an `UPDATE` that writes the
//! holder's connection id into `owner` (uncommitted; every holder rolls back).
//!
//! Invariants:
//! - The row lock lives exactly as long as the holder's transaction, so the lock
//!   dies with the connection: a crash closes the socket, and a paused or cut-off
//!   holder is disconnected by the server after `wait_timeout` (the ttl, in whole
//!   seconds) without a keepalive. The local deadline ends before either.
//! - Waiting is server-side, in InnoDB's lock queue, bounded by
//!   `innodb_lock_wait_timeout` (the wait, in whole seconds, at most one chunk per
//!   statement so a dead connection is noticed) and cut precisely by the client at
//!   the deadline; `Wait::No` uses `SELECT … FOR UPDATE NOWAIT` first.
//! - A committed row never names an owner: a non-NULL `owner`, seen under READ
//!   UNCOMMITTED, is the connection id of the transaction holding the row now
//!   (what a force-unlock kills).
//! - The token is raised on a separate autocommit connection after the row lock
//!   is held: a holder that crashes rolls back its transaction, but never its
//!   token, so the next holder's token is higher.
//! - A waiter given up on (deadline, cancel) is ended with `KILL CONNECTION`: it
//!   may have been granted the lock a moment before, and only ending its session
//!   gives that back.
//! - A lease is handed over only on a session known alive: a grant whose
//!   session the server ended while the token was raised (idle past the ttl)
//!   is taken again on a new connection (see [`Try::SessionEnded`]).
//! - A holder connection goes back to the pool only once the server confirmed
//!   it is alive and outside any transaction (see `pool`): released, or, for an
//!   abandoned lease, rolled back after its ttl and checked.

use crate::backend::{Table, retry_until};
use crate::error::{DbError, code};
use crate::keys::row_name;
use crate::pool::{Conn, Pool, Statement, Thread};
use crate::protocol::{END_TRANSACTION, IN_TRANSACTION, KEEPALIVE};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::Inspect;
use distlock_core::{Capabilities, FencingToken, LockError};
use distlock_sql::held::{HeldSession, SessionLock, Taken, holder_connection};
use distlock_sql::pool::BoxFuture;
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often one acquire starts again on a new connection after the holder's
/// session ended before the lease was handed over (see [`Try::SessionEnded`]).
const SESSIONS_ENDED_MAX: u32 = 2;

/// How one try of an acquire ended without a lease.
pub(crate) enum Try {
    /// The holder's session ended before the lease was handed over: the
    /// server closed it as idle (a pooled connection at the end of its
    /// `wait_timeout`; or, after the row lock was granted, raising the fence
    /// counter elsewhere took longer than the ttl), or it was reset. Nothing
    /// is held, and another try on a new connection may succeed.
    SessionEnded(DbError),
    Failed(LockError),
}

impl From<LockError> for Try {
    fn from(e: LockError) -> Self {
        Try::Failed(e)
    }
}

/// A `for_update` client's part of its [`HeldLock`](distlock_sql::held::HeldLock) backend.
#[derive(Debug)]
pub(crate) struct ForUpdate {
    pub table: Arc<Table>,
}

/// The instant a lease's validity is measured from, once the row lock is held.
///
/// It must not be later than the moment the server starts the session's idle
/// clock (`wait_timeout`, the lock's server-side expiry), which is when the
/// locking statement ends. `sent_at`, the send time of that statement, is such
/// a moment; but a waiter may have queued in InnoDB for longer than its ttl, and
/// measured from there its lease would start dead (`Timeout` after a won wait:
/// two waiters behind a crashed holder saw it on every hand-over). So when the
/// wait took a real part of the ttl, one keepalive on the holder connection,
/// sent now, restarts the idle clock after a fresh instant. An uncontended
/// acquire costs no extra round trip.
async fn restart_validity(
    conn: &mut Conn,
    sent_at: Instant,
    ttl: Duration,
) -> Result<Instant, DbError> {
    if sent_at.elapsed() < ttl / 4 {
        return Ok(sent_at);
    }
    let restarted = Instant::now();
    conn.execute(sqlx::query(KEEPALIVE)).await?;
    Ok(restarted)
}

#[async_trait]
impl SessionLock for ForUpdate {
    type Dialect = Thread;
    /// Nothing: the connection's transaction is the lock.
    type Held = ();

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    fn holders(&self) -> &Pool {
        &self.table.holders
    }

    async fn take(&self, req: &AcquireRequest<'_>) -> Result<Taken<Self>, LockError> {
        let mut ended = 0;
        loop {
            match self.try_acquire(req).await {
                Ok(taken) => return Ok(taken),
                Err(Try::Failed(e)) => return Err(e),
                Err(Try::SessionEnded(e)) if ended < SESSIONS_ENDED_MAX => {
                    ended += 1;
                    tracing::warn!(
                        error = %e,
                        ttl = ?req.ttl,
                        "for_update: the holder session ended before the lease was handed \
                         over; trying again on a new connection"
                    );
                }
                Err(Try::SessionEnded(e)) => {
                    return Err(self.table.error(DbError::Protocol(format!(
                        "the holder session ended {} times before the lease could be handed \
                         over (last: {e}); if the server is busy, raise the ttl of {:?} (the \
                         session's idle timeout), else check the network to the server",
                        ended + 1,
                        req.ttl
                    ))));
                }
            }
        }
    }

    /// A round trip that resets the server's idle timer (`wait_timeout`).
    fn keepalive(&self, _ttl: Duration) -> Statement {
        sqlx::query(KEEPALIVE)
    }

    /// Release rolls the transaction back, which frees the row lock (and drops
    /// the uncommitted tag). Its OK proves the session alive and outside any
    /// transaction.
    fn release(&self, _: &()) -> Statement {
        sqlx::query(END_TRANSACTION)
    }

    fn end_abandoned(conn: Conn) -> BoxFuture<'static, ()> {
        Box::pin(end_abandoned(conn))
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.table
    }
}

impl ForUpdate {
    /// One try: wait for the row lock, raise the counter, hand the lease over.
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Taken<Self>, Try> {
        let no_wait = req.wait == WaitUntil::No;
        let mut conn = holder_connection(&self.table.holders, req).await?;
        let row = row_name(req.key);
        let (sent_at, kill) = self.lock_row(req, &mut conn, &row).await?;
        // The row lock is ours. Raise the counter elsewhere: this transaction's
        // writes are rolled back, and the next holder would reuse the value.
        let bumped = async {
            let mut other = self.table.pool.get().await?;
            self.table
                .raise_counter(&mut other, &row, req.ttl, retry_until(req))
                .await
        };
        let bumped = tokio::select! {
            biased;
            bumped = bumped => bumped,
            // `kill` ends the session holding the row.
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired().into()),
        };
        let token = match bumped {
            Ok(token) => token,
            Err(e) if e.lost_to_contention() => {
                conn.discard();
                return Err(req.not_acquired().into());
            }
            Err(e) => return Err(self.fail(&mut conn, e).into()),
        };
        let sent_at = tokio::select! {
            biased;
            restarted = restart_validity(&mut conn, sent_at, req.ttl) => match restarted {
                Ok(restarted) => restarted,
                // Idle past its `wait_timeout` while the counter was raised, the
                // session was ended by the server, and its row lock with it.
                Err(e) => return Err(self.broke(&mut conn, e)),
            },
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired().into()),
        };
        kill.disarm();
        Ok(Acquired {
            handle: HeldSession::new(conn, (), req.ttl),
            token: FencingToken::new(token),
            sent_at,
        })
    }

    /// An attempt failed midway: the session's state (an open transaction, a lock
    /// it may hold) is unknown, so the connection is never reused.
    pub(crate) fn fail(&self, conn: &mut Conn, e: DbError) -> LockError {
        conn.discard();
        self.table.error(e)
    }

    /// A statement on a holder connection failed. If the session is gone, so
    /// is anything it held, and a try on a new connection may succeed (a pooled
    /// connection the server closed as idle a moment before, a session ended
    /// while the token was raised); otherwise the attempt fails.
    pub(crate) fn broke(&self, conn: &mut Conn, e: DbError) -> Try {
        if session_ended(&e) {
            conn.discard();
            Try::SessionEnded(e)
        } else {
            Try::Failed(self.fail(conn, e))
        }
    }
}

/// The statement failed because the session is gone (closed or reset by the
/// server, or killed), not for want of a reply: whatever it held was given back.
fn session_ended(e: &DbError) -> bool {
    matches!(e, DbError::Sql(sqlx::Error::Io(_))) || e.number() == Some(code::CONNECTION_KILLED)
}

/// An abandoned holder's transaction, once its ttl is over (until then it keeps
/// others out, as the other strategies' rows do): roll back, then check that no
/// transaction is open, and only then let the pool have the connection. Any
/// failure (the server already closed the idle session, no such check on
/// MySQL) closes it instead (it counts as in a transaction, so the pool never
/// takes it back).
async fn end_abandoned(mut conn: Conn) {
    let ended = async {
        conn.execute(sqlx::query(END_TRANSACTION)).await?;
        let row = conn.fetch_one(sqlx::query(IN_TRANSACTION)).await?;
        Ok::<_, DbError>(row.try_get::<i64, _>(0).map_err(DbError::Sql)? == 0)
    };
    match ended.await {
        Ok(true) => conn.holds_nothing(),
        Ok(false) => {
            tracing::warn!("an abandoned for_update session is still in a transaction; closing it")
        }
        Err(e) => {
            tracing::debug!(error = %e, "an abandoned for_update session could not be ended; closing it")
        }
    }
}
