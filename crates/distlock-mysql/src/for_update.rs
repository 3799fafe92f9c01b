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

use crate::backend::{MakeStatement, Settle, Table, Undo, retry_until, undo};
use crate::error::{BACKEND, DbError, code};
use crate::holder_session::{Session, Slot, keepalive};
use crate::keys::row_name;
use crate::pool::{Conn, Pool};
use crate::protocol::{END_TRANSACTION, HOLDER_TIMEOUTS, KEEPALIVE, KILL_CONNECTION};
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

/// How often one acquire starts again on a new connection after the holder's
/// session ended before the lease was handed over (see [`Try::SessionEnded`]).
const SESSIONS_ENDED_MAX: u32 = 2;

/// How one try of an acquire ended without a lease.
enum Try {
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

/// A `for_update` client's backend.
#[derive(Debug)]
pub(crate) struct ForUpdate {
    pub table: Arc<Table>,
    /// Connections that hold a lock's transaction, one per held or waiting lock.
    pub holders: Pool,
}

/// From the moment the locking statement is sent until the lock is handed over,
/// giving up must also give back a lock the server may have granted meanwhile:
/// only ending the session does, with `KILL CONNECTION` from another connection.
type KillGuard = CancelGuard<Undo, fn(Undo) -> Option<UndoFuture>>;

fn kill_on_drop(table: &Arc<Table>, connection_id: u64) -> KillGuard {
    let kill: MakeStatement = Box::new(move || sqlx::query(KILL_CONNECTION).bind(connection_id));
    let state = Undo {
        table: table.clone(),
        // The kill is the whole undo: the session's end gives its lock back.
        in_flight: None,
        make: kill,
    };
    CancelGuard::new(state, undo)
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
        let mut ended = 0;
        loop {
            match self.try_acquire(&req).await {
                Ok(acquired) => return Ok(acquired),
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

    /// The keepalive: a round trip on the held connection. It resets the server's
    /// idle timer (`wait_timeout`) and proves the session, and so the lock, is
    /// alive.
    ///
    /// The keepalive runs in a task of its own that holds the slot until the
    /// reply is in. A renewal is dropped mid-statement when its lease is
    /// released or its deadline passes; dropped here, it would leave its reply
    /// on the wire for the next statement to read as its own (the chaos run
    /// saw a release's `ROLLBACK` read `SELECT 1`'s, and sqlx panic decoding
    /// it). The next statement waits for the slot instead.
    async fn renew(&self, session: &Session, _ttl: Duration) -> Result<Ownership, LockError> {
        let slot = session.conn.clone().lock_owned().await;
        match tokio::spawn(keepalive(slot)).await {
            Ok(Some(ownership)) => Ok(ownership),
            Ok(None) => Err(self.unreachable()),
            Err(e) => Err(self
                .table
                .error(DbError::Protocol(format!("keepalive task: {e}")))),
        }
    }

    /// Release rolls the transaction back, which frees the row lock (and drops
    /// the uncommitted tag). Its OK proves the session alive and outside any
    /// transaction, so the connection goes back to the pool.
    async fn release(&self, session: &Session) -> Result<Ownership, LockError> {
        let mut slot = session.conn.lock().await;
        let mut conn = match std::mem::replace(&mut *slot, Slot::Ended) {
            Slot::Holding(conn) => conn,
            Slot::Unreachable => return Err(self.unreachable()),
            Slot::Ended => return Ok(Ownership::NotHeld),
        };
        match conn.execute(sqlx::query(END_TRANSACTION)).await {
            Ok(_) => {
                conn.transaction_ended();
                Ok(Ownership::Held)
            }
            Err(DbError::TimedOut(_)) => Err(self.unreachable()),
            Err(_) => Ok(Ownership::NotHeld),
        }
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        // The table's, plus a floor on the holder connections (`floor.rs`).
        Some(self)
    }
}

impl ForUpdate {
    /// One try: wait for the row lock, raise the counter, hand the lease over.
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Acquired<Session>, Try> {
        let no_wait = req.wait == WaitUntil::NoWait;
        let mut conn = tokio::select! {
            biased;
            conn = self.holders.get() => conn.map_err(|e| self.table.error(e))?,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired().into()),
        };
        let row = row_name(req.key);
        let (sent_at, kill) = self.lock_row(req, &mut conn, &row).await?;
        // The row lock is ours. Raise the counter elsewhere: this transaction's
        // writes are rolled back, and the next holder would reuse the value.
        let bumped = async {
            let mut other = self.table.pool.get().await?;
            self.table
                .bump_counter(&mut other, &row, retry_until(req))
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
            handle: Session {
                conn: Arc::new(tokio::sync::Mutex::new(Slot::Holding(conn))),
                ttl: req.ttl,
            },
            token: FencingToken::new(token),
            sent_at,
        })
    }

    /// Takes the row lock on `conn`'s transaction, waiting in InnoDB's queue in
    /// chunks of at most [`WAIT_CHUNK`]. Returns when the locking statement that
    /// won was sent, and the guard that kills the session until the lock is
    /// handed over.
    async fn lock_row(
        &self,
        req: &AcquireRequest<'_>,
        conn: &mut Conn,
        row: &[u8],
    ) -> Result<(Instant, KillGuard), Try> {
        let no_wait = req.wait == WaitUntil::NoWait;
        let ttl_seconds = whole_seconds(req.ttl);
        let until = retry_until(req);
        let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY);
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
            if conn.session != Some(timeouts) {
                let set = sqlx::query(HOLDER_TIMEOUTS)
                    .bind(timeouts.0)
                    .bind(timeouts.1);
                conn.execute(set).await.map_err(|e| self.broke(conn, e))?;
                conn.session = Some(timeouts);
                // The server now closes the session after this long idle: the pool
                // must not hand it out past that.
                conn.idle_limit = Some(Duration::from_secs(timeouts.1));
            }
            let reply_within = Duration::from_secs(timeouts.0) + self.holders.timeout();
            let sent_at = Instant::now();
            // Dropped armed on every early return below: a deadline reached
            // mid-statement, or a failure with the transaction's state unknown.
            let guard = kill_on_drop(&self.table, conn.id());
            let outcome = tokio::select! {
                biased;
                outcome = self.lock_statement(conn, row, no_wait, reply_within) => outcome,
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
            conn.transaction_ended();
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
        no_wait: bool,
        reply_within: Duration,
    ) -> Result<bool, DbError> {
        let sql = &self.table.sql;
        if no_wait {
            let nowait = sqlx::query(sql.for_update_nowait.clone()).bind(row.to_vec());
            if conn
                .fetch_optional_within(nowait, reply_within)
                .await?
                .is_none()
            {
                return Ok(false);
            }
        }
        // Waits in the row's queue (unless NOWAIT took it already) and tags it.
        let locked = conn.execute_text(sql.lock_row(row), reply_within).await?;
        Ok(locked.rows_affected() > 0)
    }

    /// Creates the missing row of `row`, retrying under contention within the
    /// request's wait.
    async fn insert_row(&self, req: &AcquireRequest<'_>, row: &[u8]) -> Result<(), LockError> {
        let insert =
            || sqlx::query(self.table.sql.for_update_insert_row.clone()).bind(row.to_vec());
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

    /// An attempt failed midway: the session's state (an open transaction, a lock
    /// it may hold) is unknown, so the connection is never reused.
    fn fail(&self, conn: &mut Conn, e: DbError) -> LockError {
        conn.discard();
        self.table.error(e)
    }

    /// A statement on a holder connection failed. If the session is gone, so
    /// is anything it held, and a try on a new connection may succeed (a pooled
    /// connection the server closed as idle a moment before, a session ended
    /// while the token was raised); otherwise the attempt fails.
    fn broke(&self, conn: &mut Conn, e: DbError) -> Try {
        if session_ended(&e) {
            conn.discard();
            Try::SessionEnded(e)
        } else {
            Try::Failed(self.fail(conn, e))
        }
    }

    fn unreachable(&self) -> LockError {
        self.table.error(DbError::Protocol(
            "the connection holding the lock stopped answering".into(),
        ))
    }
}

/// The statement failed because the session is gone (closed or reset by the
/// server, or killed), not for want of a reply: whatever it held was given back.
fn session_ended(e: &DbError) -> bool {
    matches!(e, DbError::Sql(sqlx::Error::Io(_))) || e.number() == Some(code::CONNECTION_KILLED)
}

/// The server refused the row lock for now: timeout, `NOWAIT`, or a deadlock
/// (which rolled the transaction back).
fn lock_not_granted(e: &DbError) -> bool {
    matches!(
        e.number(),
        Some(code::LOCK_WAIT_TIMEOUT | code::LOCK_NOWAIT | code::DEADLOCK)
    )
}
