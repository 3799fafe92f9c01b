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

use crate::error::{BACKEND, DbError, code};
use crate::lock::{Inner, MySqlHandle};
use crate::name::{counter_name, new_owner, row_name};
use crate::pool::Conn;
use crate::sql;
use distlock_core::backend::{AcquireRequest, Acquired, Ownership, WaitUntil};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest server-side wait per statement: a waiter whose connection died
/// finds out within this plus the request timeout.
const WAIT_CHUNK: Duration = Duration::from_secs(10);

/// The connection whose transaction holds the row lock.
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

/// Ends a holder connection with `KILL CONNECTION` when dropped armed: from the
/// moment the locking statement is sent until the lock is handed over, giving up
/// must also give back a lock the server may have granted meanwhile.
struct KillOnDrop {
    inner: Arc<Inner>,
    connection_id: u64,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, id) = (self.inner.clone(), self.connection_id);
        runtime.spawn(async move {
            let outcome = match inner.pool.get().await {
                Ok(mut conn) => conn.execute(sqlx::query(sql::KILL_CONNECTION).bind(id)).await.map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                tracing::debug!(error = %e, connection = id, "cannot kill an abandoned waiter; its socket close or wait_timeout ends it");
            }
        });
    }
}

/// Whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    req: &AcquireRequest<'_>,
) -> Result<Acquired<MySqlHandle>, LockError> {
    let holders = inner
        .holders
        .as_ref()
        .ok_or_else(|| LockError::backend(BACKEND, "for_update client without a holder pool"))?;
    let no_wait = req.wait == WaitUntil::NoWait;
    let row = row_name(req.key);
    let ttl_seconds = whole_seconds(req.ttl);
    let mut conn = tokio::select! {
        biased;
        conn = holders.get() => conn.map_err(|e| inner.error(e))?,
        _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
    };
    let mut kill = KillOnDrop {
        inner: inner.clone(),
        connection_id: conn.id(),
        armed: false,
    };
    let sent_at = loop {
        if !no_wait && req.wait.instant().is_some_and(|at| Instant::now() >= at) {
            if kill.armed {
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
            let set = sqlx::query(sql::HOLDER_TIMEOUTS)
                .bind(timeouts.0)
                .bind(timeouts.1);
            conn.execute(set)
                .await
                .map_err(|e| fail(inner, &mut conn, e))?;
            conn.session = Some(timeouts);
        }
        let statement = if no_wait {
            &inner.sql.for_update_nowait
        } else {
            &inner.sql.for_update
        };
        let lock = sqlx::query(statement.clone()).bind(row.clone());
        let reply_within = Duration::from_secs(timeouts.0) + holders.request_timeout();
        let sent_at = Instant::now();
        kill.armed = true;
        let outcome = tokio::select! {
            biased;
            outcome = conn.fetch_optional_within(lock, reply_within) => outcome,
            // Dropping `conn` mid-statement closes it; `kill` ends the session.
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        match outcome {
            Ok(Some(_)) => break sent_at,
            Ok(None) => {
                // No row yet. Inserting it inside this transaction locks the new row
                // (READ COMMITTED: the empty SELECT locked nothing); a concurrent
                // inserter makes us wait on its lock, like any other holder.
                let insert = sqlx::query(inner.sql.for_update_insert_row.clone()).bind(row.clone());
                match conn.execute(insert).await {
                    Ok(_) => {}
                    Err(e) if lock_not_granted(&e) => {
                        rollback(&mut conn)
                            .await
                            .map_err(|e| fail(inner, &mut conn, e))?;
                        kill.armed = false;
                        if no_wait {
                            return Err(req.not_acquired());
                        }
                    }
                    Err(e) => return Err(fail(inner, &mut conn, e)),
                }
            }
            Err(e) if lock_not_granted(&e) => {
                // Only the statement failed; end the transaction so nothing stays
                // locked, then wait another round (or give up).
                rollback(&mut conn)
                    .await
                    .map_err(|e| fail(inner, &mut conn, e))?;
                kill.armed = false;
                if no_wait {
                    return Err(req.not_acquired());
                }
            }
            Err(e) => return Err(fail(inner, &mut conn, e)),
        }
    };
    // The row lock is ours. Raise the counter elsewhere: this transaction's writes
    // would be rolled back with a crash, and the next holder would reuse the value.
    let token = bump_counter(inner, &row)
        .await
        .map_err(|e| fail(inner, &mut conn, e))?;
    kill.armed = false;
    let handle = MySqlHandle {
        row,
        owner: new_owner(),
        fence: token,
        session: Some(Session {
            conn: tokio::sync::Mutex::new(Slot::Holding(conn)),
            ttl: req.ttl,
        }),
    };
    Ok(Acquired {
        handle,
        token: FencingToken::new(token),
        sent_at,
    })
}

/// An attempt failed midway: the session's state (an open transaction, a lock it
/// may hold) is unknown, so the connection is never reused.
fn fail(inner: &Inner, conn: &mut Conn, e: DbError) -> LockError {
    conn.discard();
    inner.error(e)
}

/// The server refused the row lock for now: timeout, `NOWAIT`, or a deadlock
/// (which rolled the transaction back).
fn lock_not_granted(e: &DbError) -> bool {
    matches!(
        e.number(),
        Some(code::LOCK_WAIT_TIMEOUT | code::LOCK_NOWAIT | code::DEADLOCK)
    )
}

async fn rollback(conn: &mut Conn) -> Result<(), DbError> {
    conn.execute(sqlx::query(sql::ROLLBACK)).await.map(drop)
}

async fn bump_counter(inner: &Inner, row: &[u8]) -> Result<u64, DbError> {
    let mut conn = inner.pool.get().await?;
    let bump = sqlx::query(inner.sql.bump_counter.clone()).bind(counter_name(row));
    match conn.execute(bump).await?.last_insert_id() {
        token if token != 0 && token & sql::HELD_FLAG == 0 => Ok(token),
        other => Err(DbError::Protocol(format!(
            "the fence counter returned {other}"
        ))),
    }
}

/// The keepalive: a round trip on the held connection. It resets the server's
/// idle timer (`wait_timeout`) and proves the session, and so the lock, is alive.
pub(crate) async fn renew(inner: &Inner, handle: &MySqlHandle) -> Result<Ownership, LockError> {
    let Some(session) = &handle.session else {
        return Ok(Ownership::NotHeld);
    };
    let mut slot = session.conn.lock().await;
    let conn = match &mut *slot {
        Slot::Holding(conn) => conn,
        Slot::Unreachable => return Err(unreachable(inner)),
        Slot::Ended => return Ok(Ownership::NotHeld),
    };
    match conn.execute(sqlx::query(sql::KEEPALIVE)).await {
        Ok(_) => Ok(Ownership::Held),
        Err(DbError::TimedOut(_)) => {
            *slot = Slot::Unreachable;
            Err(unreachable(inner))
        }
        // The session is gone (killed, reset, server restarted): so is the lock.
        Err(e) => {
            tracing::debug!(error = %e, "for_update keepalive failed: the holder session ended");
            *slot = Slot::Ended;
            Ok(Ownership::NotHeld)
        }
    }
}

fn unreachable(inner: &Inner) -> LockError {
    DbError::Protocol("the connection holding the lock stopped answering".into())
        .into_lock_error(&inner.endpoint)
}

/// Release commits the transaction, which frees the row lock; the connection goes
/// back to the pool.
pub(crate) async fn release(inner: &Inner, handle: &MySqlHandle) -> Result<Ownership, LockError> {
    let Some(session) = &handle.session else {
        return Ok(Ownership::NotHeld);
    };
    let mut slot = session.conn.lock().await;
    let mut conn = match std::mem::replace(&mut *slot, Slot::Ended) {
        Slot::Holding(conn) => conn,
        Slot::Unreachable => return Err(unreachable(inner)),
        Slot::Ended => return Ok(Ownership::NotHeld),
    };
    match conn.execute(sqlx::query(sql::COMMIT)).await {
        Ok(_) => {
            // The session's wait_timeout is the ttl: past it the server closes the
            // idle connection, so the pool must not hand it out after that.
            let idle_limit = Duration::from_secs(whole_seconds(session.ttl));
            conn.usable_until = Some(Instant::now() + idle_limit.mul_f64(0.8));
            Ok(Ownership::Held)
        }
        Err(DbError::TimedOut(_)) => Err(unreachable(inner)),
        Err(_) => Ok(Ownership::NotHeld),
    }
}
