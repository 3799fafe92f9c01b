//! `for_update`'s wait for the row lock: the locking statement, server-side
//! in InnoDB's queue in bounded rounds, the row created when missing, and the
//! guard that ends the session if the wait is given up after the server may
//! have granted the lock. Handing the lock over is `for_update`'s.

use super::for_update::{ForUpdate, Try};
use crate::backend::{MakeStatement, Settle, Table, Undo, retry_until, undo};
use crate::error::{DbError, code};
use crate::pool::Conn;
use crate::protocol::{END_TRANSACTION, HOLDER_TIMEOUTS, KILL_CONNECTION};
use distlock_core::LockError;
use distlock_core::adapter::{AcquireRequest, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, UndoFuture};
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

/// From the moment the locking statement is sent until the lock is handed over,
/// giving up must also give back a lock the server may have granted meanwhile:
/// only ending the session does, with `KILL CONNECTION` from another connection.
pub(crate) type KillGuard = CancelGuard<Undo, fn(Undo) -> Option<UndoFuture>>;

fn kill_on_drop(table: &Arc<Table>, connection_id: u64) -> KillGuard {
    let kill: MakeStatement = Box::new(move || sqlx::query(KILL_CONNECTION).bind(connection_id));
    let state = Undo {
        table: table.clone(),
        // The kill is the whole undo: the session's end gives its lock back.
        in_flight: None,
        make: Some(kill),
    };
    CancelGuard::new(state, undo)
}

/// Whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

impl ForUpdate {
    /// Takes the row lock on `conn`'s transaction, waiting in InnoDB's queue in
    /// chunks of at most [`WAIT_CHUNK`]. Returns when the locking statement that
    /// won was sent, and the guard that kills the session until the lock is
    /// handed over.
    pub(crate) async fn lock_row(
        &self,
        req: &AcquireRequest<'_>,
        conn: &mut Conn,
        row: &[u8],
    ) -> Result<(Instant, KillGuard), Try> {
        let no_wait = req.wait == WaitUntil::No;
        let ttl_seconds = whole_seconds(req.ttl);
        let until = retry_until(req);
        let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY);
        let meta = req.meta.encode();
        loop {
            if !no_wait && req.wait.instant().is_some_and(|at| Instant::now() >= at) {
                return Err(req.not_acquired().into());
            }
            let round = match req.wait.instant() {
                _ if no_wait => Duration::ZERO,
                Some(at) => at.saturating_duration_since(Instant::now()).min(WAIT_CHUNK),
                None => WAIT_CHUNK,
            };
            let timeouts = (if no_wait { 1 } else { whole_seconds(round) }, ttl_seconds);
            if conn.session().timeouts != Some(timeouts) {
                let set = sqlx::query(HOLDER_TIMEOUTS)
                    .bind(timeouts.0)
                    .bind(timeouts.1);
                conn.execute(set).await.map_err(|e| self.broke(conn, e))?;
                let thread = conn.session_mut();
                thread.timeouts = Some(timeouts);
                // The server now closes the session after this long idle: the pool
                // must not hand it out past that.
                thread.idle_limit = Some(Duration::from_secs(timeouts.1));
            }
            let reply_within = Duration::from_secs(timeouts.0) + self.table.holders.timeout();
            let sent_at = Instant::now();
            // Dropped armed on every early return below: a deadline reached
            // mid-statement, or a failure with the transaction's state unknown.
            let guard = kill_on_drop(&self.table, conn.session().id);
            let outcome = tokio::select! {
                biased;
                outcome = self.lock_statement(conn, row, &meta, no_wait, reply_within) => outcome,
                // Dropping `conn` mid-statement closes it; `guard` ends the session.
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired().into()),
            };
            let refused = match outcome {
                Ok(true) => return Ok((sent_at, guard)),
                Ok(false) => {
                    // No row yet: READ COMMITTED locked nothing. Create it, committed
                    // at once on an autocommit connection, and lock it again.
                    guard.disarm();
                    self.insert_row(req, row).await?;
                    continue;
                }
                Err(e) if lock_not_granted(&e) => e.number(),
                Err(e) => return Err(self.broke(conn, e)),
            };
            // Refused: only the statement failed. End the transaction so nothing
            // stays locked, then wait another round (or give up).
            let rollback = conn.execute(sqlx::query(END_TRANSACTION)).await;
            rollback.map_err(|e| self.broke(conn, e))?;
            conn.holds_nothing();
            guard.disarm();
            // `Wait::No`: a row held (1205, 3572) is `Busy` at once; a deadlock
            // victim may try again within `until`.
            let again = !no_wait || refused == Some(code::DEADLOCK);
            if !again || !retry.pause(WAIT_CHUNK, until).await {
                return Err(req.not_acquired().into());
            }
        }
    }

    /// The locking statement: `true` when the row lock is now ours, `false`
    /// when the row does not exist.
    async fn lock_statement(
        &self,
        conn: &mut Conn,
        row: &[u8],
        meta: &str,
        no_wait: bool,
        reply_within: Duration,
    ) -> Result<bool, DbError> {
        let sql = &self.table.sql;
        if no_wait {
            let nowait = sqlx::query(sql.for_update_nowait.clone()).bind(row);
            if conn
                .fetch_optional_within(nowait, reply_within)
                .await?
                .is_none()
            {
                return Ok(false);
            }
        }
        // Waits in the row's queue (unless NOWAIT took it already) and tags it.
        let locked = conn
            .execute_text(sql.lock_row(row, meta), reply_within)
            .await?;
        Ok(locked.rows_affected() > 0)
    }

    /// Creates the missing row of `row`, retrying under contention within the
    /// request's wait.
    async fn insert_row(&self, req: &AcquireRequest<'_>, row: &[u8]) -> Result<(), LockError> {
        let insert = || sqlx::query(self.table.sql.for_update_insert_row.clone()).bind(row);
        let mut retry = Settle::new(retry_until(req));
        let inserted = async {
            loop {
                let mut conn = self.table.pool.get().await?;
                match conn.execute(insert()).await {
                    Ok(_) => return Ok::<_, DbError>(()),
                    Err(e) => retry.again(e).await?,
                }
            }
        };
        match inserted.await {
            Ok(_) => Ok(()),
            Err(e) if e.lost_to_contention() => Err(req.not_acquired()),
            Err(e) => Err(self.table.error(e)),
        }
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
