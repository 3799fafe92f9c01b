//! `for_update`: a dedicated connection holds an open transaction with
//! `SELECT … FOR UPDATE` on the lock's row.
//!
//! Invariants:
//! - The row lock lives exactly as long as the holder's transaction, so the lock
//!   dies with the connection: a crash closes the socket, and a paused or cut-off
//!   holder is disconnected by the server after `wait_timeout` (the ttl, in whole
//!   seconds) without a keepalive. The local deadline ends before either.
//! - Waiting is server-side, in InnoDB's lock queue, bounded by
//!   `innodb_lock_wait_timeout` (the wait, in whole seconds, at most one chunk per
//!   statement so a dead connection is noticed) and cut precisely by the client at
//!   the deadline; `Wait::No` uses `NOWAIT`.
//! - The token is raised on a separate autocommit connection after the row lock
//!   is held: a holder that crashes rolls back its transaction, but never its
//!   token, so the next holder's token is higher.
//! - A waiter given up on (deadline, cancel) is ended with `KILL CONNECTION`: it
//!   may have been granted the lock a moment before, and only ending its session
//!   gives that back.

use crate::backend::{Table, undo};
use crate::error::{BACKEND, DbError, code};
use crate::keys::row_name;
use crate::pool::{Conn, Pool, Statement};
use crate::protocol::{COMMIT, HOLDER_TIMEOUTS, KEEPALIVE, KILL_CONNECTION, ROLLBACK};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, Inspect, UndoFuture};
use distlock_core::{Capabilities, FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest server-side wait per statement: a waiter whose connection died
/// finds out within this plus the request timeout.
const WAIT_CHUNK: Duration = Duration::from_secs(10);

/// Pauses before re-queueing after the server refused the row lock (a deadlock
/// rolls back at once, so without them two contenders could spin).
const FIRST_RETRY: Duration = Duration::from_millis(4);
/// See [`FIRST_RETRY`].
const MAX_RETRY: Duration = Duration::from_millis(250);

/// A `for_update` client's backend.
#[derive(Debug)]
pub(crate) struct ForUpdate {
    pub table: Arc<Table>,
    /// Connections that hold a lock's transaction, one per held or waiting lock.
    pub holders: Pool,
}

/// What a held lock keeps: the connection whose transaction holds the row lock.
#[derive(Debug)]
pub(crate) struct Session {
    conn: tokio::sync::Mutex<Slot>,
    ttl: Duration,
}

#[derive(Debug)]
enum Slot {
    Holding(Conn),
    /// A keepalive got no reply: the connection was dropped, but whether the
    /// server still holds the lock is unknown until its `wait_timeout` ends it.
    Unreachable,
    Ended,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped without release (an abandoned lease): keep others out for the
        // ttl, as the other strategies' rows do, then let the connection go.
        let Slot::Holding(conn) = std::mem::replace(self.conn.get_mut(), Slot::Ended) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let ttl = self.ttl;
            runtime.spawn(async move {
                tokio::time::sleep(ttl).await;
                drop(conn);
            });
        }
    }
}

/// From the moment the locking statement is sent until the lock is handed over,
/// giving up must also give back a lock the server may have granted meanwhile:
/// only ending the session does, with `KILL CONNECTION` from another connection.
type KillGuard =
    CancelGuard<(Arc<Table>, Statement), fn((Arc<Table>, Statement)) -> Option<UndoFuture>>;

fn kill_on_drop(table: &Arc<Table>, connection_id: u64) -> KillGuard {
    let kill = sqlx::query(KILL_CONNECTION).bind(connection_id);
    CancelGuard::new((table.clone(), kill), undo)
}

/// Whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

#[async_trait]
impl Backend for ForUpdate {
    type Handle = Session;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<Session>, LockError> {
        let no_wait = req.wait == WaitUntil::NoWait;
        let mut conn = tokio::select! {
            biased;
            conn = self.holders.get() => conn.map_err(|e| self.table.error(e))?,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        let row = row_name(req.key);
        let (sent_at, kill) = self.lock_row(&req, &mut conn, &row).await?;
        // The row lock is ours. Raise the counter elsewhere: this transaction's
        // writes would be rolled back with a crash, and the next holder would reuse
        // the value.
        let bumped = async {
            let mut other = self.table.pool.get().await?;
            self.table.bump_counter(&mut other, &row).await
        };
        let token = bumped.await.map_err(|e| self.fail(&mut conn, e))?;
        kill.disarm();
        Ok(Acquired {
            handle: Session {
                conn: tokio::sync::Mutex::new(Slot::Holding(conn)),
                ttl: req.ttl,
            },
            token: FencingToken::new(token),
            sent_at,
        })
    }

    /// The keepalive: a round trip on the held connection. It resets the server's
    /// idle timer (`wait_timeout`) and proves the session, and so the lock, is
    /// alive.
    async fn renew(&self, session: &Session, _ttl: Duration) -> Result<Ownership, LockError> {
        let mut slot = session.conn.lock().await;
        let conn = match &mut *slot {
            Slot::Holding(conn) => conn,
            Slot::Unreachable => return Err(self.unreachable()),
            Slot::Ended => return Ok(Ownership::NotHeld),
        };
        match conn.execute(sqlx::query(KEEPALIVE)).await {
            Ok(_) => Ok(Ownership::Held),
            Err(DbError::TimedOut(_)) => {
                *slot = Slot::Unreachable;
                Err(self.unreachable())
            }
            // The session is gone (killed, reset, server restarted): so is the lock.
            Err(e) => {
                tracing::debug!(error = %e, "for_update keepalive failed: the holder session ended");
                *slot = Slot::Ended;
                Ok(Ownership::NotHeld)
            }
        }
    }

    /// Release commits the transaction, which frees the row lock; the connection
    /// goes back to the pool.
    async fn release(&self, session: &Session) -> Result<Ownership, LockError> {
        let mut slot = session.conn.lock().await;
        let mut conn = match std::mem::replace(&mut *slot, Slot::Ended) {
            Slot::Holding(conn) => conn,
            Slot::Unreachable => return Err(self.unreachable()),
            Slot::Ended => return Ok(Ownership::NotHeld),
        };
        match conn.execute(sqlx::query(COMMIT)).await {
            Ok(_) => {
                // The session's wait_timeout is the ttl: past it the server closes
                // the idle connection, so the pool must not hand it out after that.
                let idle_limit = Duration::from_secs(whole_seconds(session.ttl));
                conn.usable_until = Some(Instant::now() + idle_limit.mul_f64(0.8));
                Ok(Ownership::Held)
            }
            Err(DbError::TimedOut(_)) => Err(self.unreachable()),
            Err(_) => Ok(Ownership::NotHeld),
        }
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(&*self.table)
    }
}

impl ForUpdate {
    /// Takes the row lock on `conn`'s transaction, waiting in InnoDB's queue in
    /// chunks of at most [`WAIT_CHUNK`]. Returns when the locking statement that
    /// won was sent, and the guard that kills the session until the lock is
    /// handed over.
    async fn lock_row(
        &self,
        req: &AcquireRequest<'_>,
        conn: &mut Conn,
        row: &[u8],
    ) -> Result<(Instant, KillGuard), LockError> {
        let no_wait = req.wait == WaitUntil::NoWait;
        let ttl_seconds = whole_seconds(req.ttl);
        let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY);
        // Armed while the transaction may hold (or be granted) the row.
        let mut kill: Option<KillGuard> = None;
        loop {
            if !no_wait && req.wait.instant().is_some_and(|at| Instant::now() >= at) {
                if kill.is_some() {
                    // The transaction may hold the row it just created.
                    conn.discard();
                }
                return Err(req.not_acquired());
            }
            let round = match req.wait.instant() {
                _ if no_wait => Duration::ZERO,
                Some(at) => at.saturating_duration_since(Instant::now()).min(WAIT_CHUNK),
                None => WAIT_CHUNK,
            };
            let timeouts = (if no_wait { 1 } else { whole_seconds(round) }, ttl_seconds);
            if conn.session != Some(timeouts) {
                let set = sqlx::query(HOLDER_TIMEOUTS)
                    .bind(timeouts.0)
                    .bind(timeouts.1);
                conn.execute(set).await.map_err(|e| self.fail(conn, e))?;
                conn.session = Some(timeouts);
            }
            let sql = &self.table.sql;
            let statement = if no_wait {
                &sql.for_update_nowait
            } else {
                &sql.for_update
            };
            let lock = sqlx::query(statement.clone()).bind(row.to_vec());
            let reply_within = Duration::from_secs(timeouts.0) + self.holders.timeout();
            let sent_at = Instant::now();
            // Dropped armed on every early return below: a deadline reached
            // mid-statement, or a failure with the transaction's state unknown.
            let guard = kill
                .take()
                .unwrap_or_else(|| kill_on_drop(&self.table, conn.id()));
            let outcome = tokio::select! {
                biased;
                outcome = conn.fetch_optional_within(lock, reply_within) => outcome,
                // Dropping `conn` mid-statement closes it; `guard` ends the session.
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
            };
            match outcome {
                Ok(Some(_)) => return Ok((sent_at, guard)),
                Ok(None) => {
                    // No row yet. Inserting it inside this transaction locks the new
                    // row (READ COMMITTED: the empty SELECT locked nothing); a
                    // concurrent inserter makes us wait on its lock, like any other
                    // holder. Then the SELECT again, the new row still ours.
                    let insert = sqlx::query(sql.for_update_insert_row.clone()).bind(row.to_vec());
                    match conn.execute(insert).await {
                        Ok(_) => {
                            kill = Some(guard);
                            continue;
                        }
                        Err(e) if lock_not_granted(&e) => {}
                        Err(e) => return Err(self.fail(conn, e)),
                    }
                }
                Err(e) if lock_not_granted(&e) => {}
                Err(e) => return Err(self.fail(conn, e)),
            }
            // Refused: only the statement failed. End the transaction so nothing
            // stays locked, then wait another round (or give up).
            let rollback = conn.execute(sqlx::query(ROLLBACK)).await;
            rollback.map_err(|e| self.fail(conn, e))?;
            guard.disarm();
            if no_wait || !retry.pause(WAIT_CHUNK, req.wait).await {
                return Err(req.not_acquired());
            }
        }
    }

    /// An attempt failed midway: the session's state (an open transaction, a lock
    /// it may hold) is unknown, so the connection is never reused.
    fn fail(&self, conn: &mut Conn, e: DbError) -> LockError {
        conn.discard();
        self.table.error(e)
    }

    fn unreachable(&self) -> LockError {
        self.table.error(DbError::Protocol(
            "the connection holding the lock stopped answering".into(),
        ))
    }
}

/// The server refused the row lock for now: timeout, `NOWAIT`, or a deadlock
/// (which rolled the transaction back).
fn lock_not_granted(e: &DbError) -> bool {
    matches!(
        e.number(),
        Some(code::LOCK_WAIT_TIMEOUT | code::LOCK_NOWAIT | code::DEADLOCK)
    )
}
