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
//!   both, whether the lock is free or not; two such names never share a lock
//!   silently.
//! - A connection that may hold the lock goes back to the pool only once the
//!   server confirmed the unlock (see `pool`); an attempt cut off mid-statement
//!   closes its connection and ends its session (the lock goes with it).
//! - Waiting polls `pg_try_advisory_lock`, woken by the release's `NOTIFY`
//!   (never a server-side wait for the lock, which a cancelled caller could
//!   leave queued), with a bounded backoff for a notification that is lost.
//! - A release notifies only when someone waits, so an uncontended cycle
//!   wakes no client's listener. A waiter marks the name: its first busy
//!   attempt takes a shared advisory lock on the key's two 32-bit halves
//!   ([`mark`]; two `int4`s are another lock space than the `int8` lock) and
//!   tries once more in the same statement, so a release that ran between
//!   the failed try and the mark is not missed. The release unlocks first and
//!   then notifies only if it cannot take that pair exclusively
//!   (`pg_try_advisory_xact_lock`, gone when its statement ends): an unlock
//!   after a waiter's mark is seen, and one before it lets the waiter's
//!   second try win. The attempt that wins drops its mark in its statement; a
//!   waiter that gives up closes its connection (never pooled with a mark).
//!   A waiter that does not mark (an older version's, during a rolling
//!   upgrade) is not notified and sees the release by its poll, within
//!   [`MAX_PAUSE`].

use crate::backend::{Table, Undo, undo};
use crate::counter::{Counter, collision};
use crate::error::DbError;
use crate::keys::advisory_key;
use crate::pool::{Conn, Pool, Statement};
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, Inspect};
use distlock_core::{Capabilities, FencingToken, LockError};
use distlock_sql::held::{HeldSession, SessionLock, Taken, holder_connection};
use sqlx::Row;
use sqlx::postgres::PgRow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first pause after a busy attempt.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a release whose notification was lost (a crashed
/// holder notifies nothing) is seen within this.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// An `advisory` client's part of its [`HeldLock`](distlock_sql::held::HeldLock) backend.
#[derive(Debug)]
pub(crate) struct Advisory {
    pub table: Arc<Table>,
    /// Connections that hold (or try for) a lock, one per held or waiting lock.
    pub holders: Pool,
}

/// What the release of a held lock names: its key, and the payload its
/// `NOTIFY` wakes the name's waiters with.
#[derive(Debug)]
pub(crate) struct Unlock {
    pub key: i64,
    pub payload: String,
}

/// What an attempt does with the name's waiter mark (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Not waiting: never marks.
    Never,
    /// Waiting and not yet marked: marks when busy, then tries once more.
    OnBusy,
    /// The session holds the mark: a win drops it.
    Held,
}

/// The waiter mark of advisory key `key`: its two 32-bit halves, high then
/// low, as the two `int4`s of a two-key advisory lock (which `pg_locks` shows
/// with the `int8` lock's `classid` and `objid`, and `objsubid` 2).
pub(crate) fn mark(key: i64) -> (i32, i32) {
    // `as` keeps the low 32 bits of each.
    ((key >> 32) as i32, key as i32)
}

impl Unlock {
    /// The release statement of this lock on `table`.
    pub fn statement(&self, table: &Table) -> Statement {
        let (high, low) = mark(self.key);
        sqlx::query(table.sql.advisory_release.clone())
            .bind(self.key)
            .bind(table.sql.channel.clone())
            .bind(self.payload.clone())
            .bind(high)
            .bind(low)
    }
}

/// What one attempt found.
pub(crate) enum Attempt {
    Won(FencingToken),
    /// Won, and the name has no counter row (new, or collected).
    Uncounted,
    Busy,
    /// The key is recorded for another name (namespace, name).
    Collision(String, String),
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
        let no_wait = req.wait == WaitUntil::No;
        let mut conn = holder_connection(&self.holders, req).await?;
        let key = advisory_key(&table.namespace, req.key);
        let payload = table.payload(req.key);
        let waiter = table.wakeups.waiter(&payload);
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        let meta = req.meta.encode();
        let counter = Counter {
            key: req.key,
            lock_key: key,
            meta: &meta,
        };
        // The name's counter row was created by this acquire.
        let mut created = false;
        // This session holds the name's waiter mark.
        let mut marked = false;
        loop {
            let notified = waiter.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let sent_at = Instant::now();
            conn.may_hold();
            // Dropped armed (deadline or cancel mid-statement, or a failure):
            // ends the session, and with it any lock the statement took.
            let state = Undo {
                table: table.clone(),
                in_flight: Some(conn.session()),
                make: None,
            };
            let guard = CancelGuard::new(state, undo);
            let marking = match (marked, no_wait) {
                (true, _) => Mark::Held,
                (false, true) => Mark::Never,
                (false, false) => Mark::OnBusy,
            };
            let attempt = tokio::select! {
                biased;
                attempt = attempt(table, &mut conn, req.key.as_str(), key, req.ttl, &meta, marking) => attempt,
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
            };
            // A busy attempt that may wait leaves the session marked; a win
            // dropped the mark.
            marked = matches!(attempt, Ok(Attempt::Busy)) && !no_wait;
            let won = match attempt {
                Ok(Attempt::Won(token)) => Some(Ok(token)),
                // A new or collected name: the lock is given back while its
                // counter row is created, and the next attempt takes both.
                // Created holding the lock, the row's statements (a
                // connection, the namespace's floor locked, a commit) would
                // run inside the lease's ttl, counted from `sent_at`.
                Ok(Attempt::Uncounted) if !created => {
                    let unlock = self.release(&Unlock {
                        key,
                        payload: payload.clone(),
                    });
                    match conn.fetch_all(unlock).await {
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
                // Collected again right after its creation: created holding
                // the lock.
                Ok(Attempt::Uncounted) => Some(counter.raise(table).await),
                Ok(Attempt::Busy) => None,
                Ok(Attempt::Collision(namespace, name)) => {
                    Some(Err(collision(table, req.key, &namespace, &name)))
                }
                Err(e) => Some(Err(table.error(e))),
            };
            match won {
                Some(Ok(token)) => {
                    guard.disarm();
                    return Ok(Acquired {
                        handle: HeldSession::new(conn, Unlock { key, payload }, req.ttl),
                        token,
                        sent_at,
                    });
                }
                Some(Err(e)) => {
                    conn.discard();
                    return Err(e);
                }
                None => {
                    // The server answered that it did not grant the lock.
                    guard.disarm();
                    if no_wait {
                        conn.holds_nothing();
                        return Err(req.not_acquired());
                    }
                    // The session keeps its mark while it waits: given up, the
                    // connection is closed rather than pooled (see `pool`).
                }
            }
            tokio::select! {
                () = &mut notified => backoff.reset(),
                more = backoff.pause(MAX_PAUSE, req.wait) => if !more {
                    return Err(req.not_acquired());
                },
            }
        }
    }

    /// Sets the session's idle timeout for `ttl` again.
    fn keepalive(&self, ttl: Duration) -> Statement {
        sqlx::query(self.table.sql.advisory_keepalive.clone()).bind(idle_timeout(ttl))
    }

    /// Unlocks, notifies waiters (if any marked the name) and clears the idle
    /// timeout in one statement.
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

/// The advisory acquire statement on `conn` (which must be marked as maybe
/// holding a lock): one try for the lock (two with [`Mark::OnBusy`], around
/// the mark) and, when won, the counter bump (when the name has a counter
/// row; see `counter`) and the drop of the session's mark.
pub(crate) async fn attempt(
    table: &Table,
    conn: &mut Conn,
    name: &str,
    key: i64,
    ttl: Duration,
    meta: &str,
    marking: Mark,
) -> Result<Attempt, DbError> {
    let (high, low) = mark(key);
    let statement = sqlx::query(table.sql.advisory_acquire.clone())
        .bind(table.namespace.clone())
        .bind(name.to_owned())
        .bind(key)
        .bind(idle_timeout(ttl))
        .bind(meta.to_owned())
        .bind(marking == Mark::OnBusy)
        .bind(marking == Mark::Held)
        .bind(high)
        .bind(low);
    let row = conn.fetch_one(statement).await?;
    let decode = |e| DbError::Sql(e);
    let got: Option<bool> = row.try_get(0).map_err(decode)?;
    let token: Option<i64> = row.try_get(1).map_err(decode)?;
    let other_namespace: Option<String> = row.try_get(2).map_err(decode)?;
    let other_name: Option<String> = row.try_get(3).map_err(decode)?;
    match (got, token, other_namespace, other_name) {
        (Some(true), Some(token), None, None) => u64::try_from(token)
            .map(|token| Attempt::Won(FencingToken::new(token)))
            .map_err(|_| DbError::Protocol(format!("the counter returned {token}"))),
        (Some(true), None, None, None) => Ok(Attempt::Uncounted),
        (_, None, Some(namespace), Some(name)) => Ok(Attempt::Collision(namespace, name)),
        (Some(false), None, None, None) => Ok(Attempt::Busy),
        other => Err(DbError::Protocol(format!(
            "the advisory lock statement answered {other:?}"
        ))),
    }
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
