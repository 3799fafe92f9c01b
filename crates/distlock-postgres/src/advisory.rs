//! `advisory`: a session-level advisory lock (`pg_try_advisory_lock`) on a
//! connection of its own, keyed by a stable hash of namespace and name
//! ([`advisory_key`]).
//!
//! Invariants:
//! - The lock lives exactly as long as the holder's session: a crash closes the
//!   socket, `pg_terminate_backend` ends it, and a paused or cut-off holder is
//!   disconnected by the server once idle for 1.5 × ttl (`idle_session_timeout`,
//!   set by the statement that won and by every keepalive). The local deadline
//!   ends before any of them.
//! - The token is the lock row's `fence`, raised by the same statement that
//!   took the lock and only when it did: the bump runs after the lock is held,
//!   on the holder's own session, and commits before the reply is read. A
//!   holder that crashes after the reply keeps its committed value; one that
//!   crashes before commit never saw a token. So every holder's token exceeds
//!   every earlier holder's.
//! - Hash collisions: the row records its key (`lock_key`, unique). A name
//!   whose key is recorded for another name is refused with an error naming
//!   both once it gets the key's lock (after the other name's holder, if
//!   any), before any token; two such names never share a lock silently. The
//!   look for another name runs only while a name has no row recording its
//!   key, so that a name in use pays nothing for it.
//! - A connection that may hold the lock goes back to the pool only once the
//!   server confirmed the unlock (see `pool`); an attempt cut off mid-statement
//!   closes its connection and ends its session (the lock goes with it).
//! - A waiter waits in the server's own lock queue: its statement is
//!   `pg_advisory_lock` under a `lock_timeout` of the wait left (at most
//!   [`LONGEST_WAIT`], then it queues again), so a release hands the lock to
//!   the first waiter on the server, whose statement goes on to raise the
//!   counter and answers: a hand-off costs no round trip after the unlock,
//!   and no notification. A wait that runs out gives back the lock in case
//!   the server granted it just before (the counter bump then waited for its
//!   row). A waiter cancelled in the queue is an attempt cut off
//!   mid-statement: its session is ended, which takes it out of the
//!   queue (or frees the lock the server granted it meanwhile). The lease
//!   counts from the statement's send plus the time the server says it
//!   waited, no later than the grant.

use crate::backend::{Table, Undo, undo};
use crate::counter::{Counter, token};
use crate::error::DbError;
use crate::keys::advisory_key;
use crate::pool::{Conn, Pool, Statement};
use crate::protocol::ADVISORY_GIVE_BACK;
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{CancelGuard, Inspect};
use distlock_core::{Capabilities, FencingToken, LockError};
use distlock_sql::held::{HeldSession, SessionLock, Taken, holder_connection};
use distlock_sql::table::with_room;
use sqlx::Row;
use sqlx::postgres::PgRow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest one wait in the server's lock queue lasts before the waiter
/// queues again: a server that stopped answering is noticed within this and
/// the reply timeout.
const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// An `advisory` client's part of its [`HeldLock`](distlock_sql::held::HeldLock) backend.
#[derive(Debug)]
pub(crate) struct Advisory {
    pub table: Arc<Table>,
    /// Connections that hold (or try for) a lock, one per held or waiting lock.
    pub holders: Pool,
}

/// What the release of a held lock names: its advisory key.
#[derive(Debug)]
pub(crate) struct Unlock {
    pub key: i64,
}

impl Unlock {
    /// The release statement of this lock on `table`.
    pub fn statement(&self, table: &Table) -> Statement {
        sqlx::query(table.sql.advisory_release.clone()).bind(self.key)
    }
}

/// What one attempt found.
pub(crate) enum Attempt {
    /// Won, after waiting this long in the server's lock queue.
    Won(FencingToken, Duration),
    /// Won, and the name has no counter row (new, or collected), or its row
    /// does not record the key yet.
    Uncounted(Duration),
    Busy,
}

#[async_trait]
impl SessionLock for Advisory {
    type Dialect = Session;
    type Held = Unlock;

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    fn holders(&self) -> &Pool {
        &self.holders
    }

    async fn take(&self, req: &AcquireRequest<'_>) -> Result<Taken<Self>, LockError> {
        let table = &self.table;
        let mut conn = holder_connection(&self.holders, req).await?;
        let key = advisory_key(&table.namespace, req.key);
        let meta = req.meta.encode();
        let counter = Counter {
            key: req.key,
            lock_key: key,
            meta: &meta,
        };
        // The name's counter row was created by this acquire.
        let mut created = false;
        loop {
            let queue = queue_for(req.wait);
            let sent_at = Instant::now();
            conn.may_hold();
            // Dropped armed (cancelled mid-statement, or a failure): ends the
            // session, and with it any lock or place in the queue it took.
            let state = Undo {
                table: table.clone(),
                in_flight: Some(conn.session()),
                make: None,
            };
            let guard = CancelGuard::new(state, undo);
            let attempt = attempt(
                table,
                &mut conn,
                req.key.as_str(),
                key,
                req.ttl,
                &meta,
                queue,
            );
            let won = match attempt.await {
                Ok(Attempt::Won(token, waited)) => Some(Ok((token, waited))),
                // A new or collected name: the lock is given back while its
                // counter row is created, and the next attempt takes both
                // (a row that is there but does not record the key is left
                // as it is, and raised below).
                // Created holding the lock, the row's statements (a
                // connection, the namespace's floor locked, a commit) would
                // run inside the lease's ttl, counted from `sent_at`.
                Ok(Attempt::Uncounted(_)) if !created => {
                    match conn.fetch_all(self.release(&Unlock { key })).await {
                        Ok(rows) if Self::released(&rows) => {
                            conn.holds_nothing();
                            guard.disarm();
                            counter.create(table).await?;
                            created = true;
                            continue;
                        }
                        Ok(_) => Some(Err(table.error(DbError::Protocol(
                            "the unlock of a lock just taken found it not held".into(),
                        )))),
                        Err(e) => Some(Err(table.error(e))),
                    }
                }
                // Collected again right after its creation (created holding
                // the lock), or a row that does not record the key: raised
                // once no other name records it, or refused.
                Ok(Attempt::Uncounted(waited)) => {
                    Some(counter.raise(table).await.map(|token| (token, waited)))
                }
                Ok(Attempt::Busy) => None,
                Err(e) => Some(Err(table.error(e))),
            };
            match won {
                Some(Ok((token, waited))) => {
                    guard.disarm();
                    return Ok(Acquired {
                        handle: HeldSession::new(conn, Unlock { key }, req.ttl),
                        token,
                        sent_at: sent_at + waited,
                    });
                }
                Some(Err(e)) => {
                    conn.discard();
                    return Err(e);
                }
                None => {
                    // The server answered that it did not grant the lock
                    // (within the attempt's wait in its queue).
                    guard.disarm();
                    if queue_for(req.wait).is_none() {
                        conn.holds_nothing();
                        return Err(req.not_acquired());
                    }
                }
            }
        }
    }

    /// Sets the session's idle timeout for `ttl` again.
    fn keepalive(&self, ttl: Duration) -> Statement {
        sqlx::query(self.table.sql.advisory_keepalive.clone()).bind(idle_timeout(ttl))
    }

    /// Unlocks and clears the idle timeout in one statement; the server hands
    /// the lock to the first waiter in its queue.
    fn release(&self, unlock: &Unlock) -> Statement {
        unlock.statement(&self.table)
    }

    /// The release's `true` proves the session held the lock and now holds none.
    fn released(rows: &[PgRow]) -> bool {
        rows.first().and_then(|row| row.try_get(0).ok()) == Some(true)
    }

    fn inspect(&self) -> &dyn Inspect {
        &*self.table
    }
}

/// How long an attempt started now waits in the server's lock queue: none
/// (one try) without a wait or once it is over, else the wait left, at most
/// [`LONGEST_WAIT`].
fn queue_for(wait: WaitUntil) -> Option<Duration> {
    match wait.instant() {
        None => Some(LONGEST_WAIT),
        Some(at) => Some(at.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero() && wait != WaitUntil::No)
            .map(|left| left.min(LONGEST_WAIT)),
    }
}

/// The advisory acquire statement on `conn` (which must be marked as maybe
/// holding a lock): the lock, tried or waited for in the server's queue for
/// `queue`, and when won the counter bump (when the name's counter row
/// records the key; see `counter`). A wait that ran out is [`Attempt::Busy`].
pub(crate) async fn attempt(
    table: &Table,
    conn: &mut Conn,
    name: &str,
    key: i64,
    ttl: Duration,
    meta: &str,
    queue: Option<Duration>,
) -> Result<Attempt, DbError> {
    let idle = idle_timeout(ttl);
    let queue_millis = queue.map(ceil_millis);
    let bytes = table.namespace.len()
        + name.len()
        + 8
        + idle.len()
        + meta.len()
        + queue_millis.as_ref().map_or(0, String::len);
    let statement = with_room(&table.sql.advisory_acquire, 6, bytes)
        .bind(&*table.namespace)
        .bind(name)
        .bind(key)
        .bind(idle)
        .bind(meta)
        .bind(queue_millis);
    let limit = queue.unwrap_or_default() + table.pool.timeout();
    let row = match conn.fetch_optional_within(statement, limit).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return Err(DbError::Protocol(
                "the advisory lock statement answered no row".into(),
            ));
        }
        // `lock_timeout`: the wait ran out, nothing written. It may have run
        // out after the grant, while the counter bump waited for its row (a
        // collection, or an operator, holding it): a session's advisory lock
        // outlives its statement's error, so it is given back.
        Err(e) if e.lost_to_contention() => {
            conn.execute(sqlx::query(ADVISORY_GIVE_BACK)).await?;
            return Ok(Attempt::Busy);
        }
        Err(e) => return Err(e),
    };
    let decode = |e| DbError::Sql(e);
    let got: Option<bool> = row.try_get(0).map_err(decode)?;
    let value: Option<i64> = row.try_get(1).map_err(decode)?;
    let waited: Option<i64> = row.try_get(2).map_err(decode)?;
    let waited = Duration::from_micros(
        waited
            .and_then(|micros| u64::try_from(micros).ok())
            .unwrap_or(0),
    );
    match (got, value) {
        (Some(true), Some(value)) => Ok(Attempt::Won(token(value)?, waited)),
        (Some(true), None) => Ok(Attempt::Uncounted(waited)),
        (Some(false), None) => Ok(Attempt::Busy),
        other => Err(DbError::Protocol(format!(
            "the advisory lock statement answered {other:?}"
        ))),
    }
}

/// `wait` in whole milliseconds rounded up, at least 1 (`lock_timeout`'s 0
/// is no limit), as `set_config` takes it.
fn ceil_millis(wait: Duration) -> String {
    wait.as_nanos().div_ceil(1_000_000).max(1).to_string()
}

/// The idle timeout the server enforces on a holder's session: 1.5 × ttl, in
/// whole milliseconds rounded up, as `set_config` takes it.
///
/// Longer than the ttl on purpose: the server counts from the end of the last
/// statement it ran, and a client that renews on time but is scheduled late
/// must not find its session ended while its lease is still valid. A
/// partitioned holder stops believing at its local deadline (within the ttl),
/// so the extra half only delays the takeover.
fn idle_timeout(ttl: Duration) -> String {
    let millis = (ttl.as_nanos() + ttl.as_nanos() / 2)
        .div_ceil(1_000_000)
        .max(1);
    millis.to_string()
}
