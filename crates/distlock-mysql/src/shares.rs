//! What the semaphore and the read-write lock share: a table of expiring share
//! rows under one head row per name, and the transaction that takes a share.
//!
//! Layout (one table per primitive, same shape): the head row (`slot` =
//! [`HEAD_SLOT`]) of a name holds the fencing counter in `fence` and, for a
//! semaphore, the limit in `permits`; every other row is one share (a permit,
//! a read or write share, a writer's intent) with its `owner`, its token in
//! `fence` and its expiry on the server clock.
//!
//! Invariants:
//! - Every taking transaction first raises the head row's counter, which locks
//!   the head: takers of one name are serialized, and each sees every share the
//!   ones before it committed. The token is the raised counter, so tokens rise
//!   per name across all shares of every kind.
//! - A share row is written only by a taker holding the head lock, renewed only
//!   while unexpired (`expires_at > NOW(6)`), so a share seen expired stays
//!   expired and can be overwritten; release and operator deletes remove rows.
//! - Refused statements (1205, 1213) end the transaction by closing the
//!   connection, and the attempt is tried again within the caller's wait, like
//!   the lock's.

use crate::backend::{MakeStatement, Table, Undo, micros, retry_until, undo};
use crate::error::{BACKEND, DbError};
use crate::keys::TableName;
use crate::pool::Conn;
use crate::protocol::{HELD_FLAG, for_table};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Holding, Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, UndoFuture, random_owner};
use distlock_core::{FencingToken, LockError};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row, SqlSafeStr, SqlStr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The semaphore table's name: the lock table's plus this.
pub(crate) const SEMAPHORE_TABLE: &str = "_sem";
/// The read-write lock table's name: the lock table's plus this.
pub(crate) const RWLOCK_TABLE: &str = "_rw";

/// The head row's slot: above every share's.
pub(crate) const HEAD_SLOT: u32 = u32::MAX;

/// The first pause after an attempt that found no room.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a freed share is seen within this (plus one attempt).
const MAX_PAUSE: Duration = Duration::from_millis(250);

const CREATE: &str = include_str!("sql/shares_create_table.sql");
const BUMP_HEAD: &str = include_str!("sql/shares_bump_head.sql");
const ROWS: &str = include_str!("sql/shares_rows.sql");
const SET_PERMITS: &str = include_str!("sql/shares_set_permits.sql");
const TAKE: &str = include_str!("sql/shares_take.sql");
const RENEW: &str = include_str!("sql/shares_renew.sql");
const RELEASE: &str = include_str!("sql/shares_release.sql");
const DROP_OWNER: &str = include_str!("sql/shares_drop_owner.sql");
const DROP_MARK: &str = include_str!("sql/shares_drop_mark.sql");
const DROP_EXPIRED: &str = include_str!("sql/shares_drop_expired.sql");
const LIVE: &str = include_str!("sql/shares_live.sql");
const DELETE_LIVE: &str = include_str!("sql/shares_delete_live.sql");

/// The share table of one primitive: its name, statements and the lock
/// table's connections.
#[derive(Debug)]
pub(crate) struct Shares {
    pub base: Arc<Table>,
    bump_head: SqlStr,
    rows: SqlStr,
    set_permits: SqlStr,
    take: SqlStr,
    renew: SqlStr,
    release: SqlStr,
    drop_owner: SqlStr,
    drop_mark: SqlStr,
    drop_expired: SqlStr,
    pub live: SqlStr,
    pub delete_live: SqlStr,
}

impl Shares {
    /// The share table `{lock table}{suffix}`, created first when `create`.
    pub async fn open(
        base: Arc<Table>,
        suffix: &str,
        create: bool,
    ) -> Result<Arc<Shares>, LockError> {
        let derived = format!("{}{suffix}", base.name);
        let name = TableName::new(&derived).map_err(|_| {
            LockError::config(
                BACKEND,
                format!(
                    "the table `{derived}` (the lock table's name plus `{suffix}`) is not a valid table \
                     name; choose a lock table name of at most {} characters",
                    64 - suffix.len()
                ),
            )
        })?;
        if create {
            let sql = CREATE.replace("{table}", name.as_str()).replace(
                "{comment}",
                &format!("distlock:{}", suffix.trim_start_matches('_')),
            );
            let mut conn = base.pool.get().await.map_err(|e| base.error(e))?;
            conn.execute(sqlx::query(AssertSqlSafe(sql).into_sql_str()))
                .await
                .map_err(|e| base.error(e))?;
        }
        let build = |template| for_table(template, &name);
        Ok(Arc::new(Shares {
            bump_head: build(BUMP_HEAD),
            rows: build(ROWS),
            set_permits: build(SET_PERMITS),
            take: build(TAKE),
            renew: build(RENEW),
            release: build(RELEASE),
            drop_owner: build(DROP_OWNER),
            drop_mark: build(DROP_MARK),
            drop_expired: build(DROP_EXPIRED),
            live: build(LIVE),
            delete_live: build(DELETE_LIVE),
            base,
        }))
    }
}

/// One row of a name as a taker sees it.
#[derive(Debug)]
pub(crate) struct ShareRow {
    pub slot: u32,
    pub permits: Option<u32>,
    pub owner: Option<Vec<u8>>,
    pub live: bool,
    pub remaining: Duration,
}

impl ShareRow {
    fn read(row: &MySqlRow) -> Result<ShareRow, DbError> {
        let live: i64 = row.try_get(3)?;
        let remaining: i64 = row.try_get(4)?;
        Ok(ShareRow {
            slot: row.try_get(0)?,
            permits: row.try_get(1)?,
            owner: row.try_get(2)?,
            live: live != 0,
            remaining: Duration::from_micros(u64::try_from(remaining).unwrap_or(0)),
        })
    }
}

/// What a taker decided from the rows.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Take `slot`; first set the head's limit to `permits` when given.
    Take { slot: u32, permits: Option<u32> },
    /// No room for about `remaining`; `mark` is a slot to hold meanwhile (a
    /// writer's intent) and its ttl, kept by committing.
    Wait {
        remaining: Duration,
        mark: Option<(u32, Duration)>,
    },
    /// Give up with this error.
    Refuse(LockError),
}

/// One primitive's rules for taking a share.
pub(crate) trait Taker: Send + Sync {
    /// The head's `permits` when it is created.
    fn permits(&self) -> Option<u32>;
    /// Where the share goes, given every row of the name and this attempt's
    /// owner (and earlier attempts' owners of this acquire: the caller's own
    /// mark).
    fn plan(&self, rows: &[ShareRow], mine: &[u8]) -> Plan;
}

/// A held share: its table, name, owner and token.
#[derive(Debug)]
pub(crate) struct ShareHandle {
    shares: Arc<Shares>,
    name: Vec<u8>,
    owner: String,
    fence: u64,
}

#[async_trait]
impl Holding for ShareHandle {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        let statement = || {
            sqlx::query(self.shares.renew.clone())
                .bind(micros(ttl))
                .bind(self.name.clone())
                .bind(self.owner.clone())
                .bind(self.fence)
        };
        self.shares.base.compare_owner(statement).await
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let statement = || {
            sqlx::query(self.shares.release.clone())
                .bind(self.name.clone())
                .bind(self.owner.clone())
                .bind(self.fence)
        };
        self.shares.base.compare_owner(statement).await
    }
}

/// Undoes an acquire given up on: deletes its owner's rows.
type ShareGuard = CancelGuard<Undo, fn(Undo) -> Option<UndoFuture>>;

/// The outcome of one attempt.
enum Attempt {
    Won {
        token: u64,
        slot: u32,
        sent_at: Instant,
    },
    /// No room; `marked` when the attempt committed a mark.
    Wait {
        remaining: Duration,
        marked: bool,
    },
    Refuse(LockError),
}

/// Takes a share of `name` as `taker` decides, waiting per `req.wait` by
/// polling. Returns the handle and its slot. Cancel-safe: an attempt cut off
/// after its first statement deletes, in the background, whatever rows its
/// owner may have committed (after the cut-off session ended).
pub(crate) async fn take(
    shares: &Arc<Shares>,
    req: &AcquireRequest<'_>,
    name: Vec<u8>,
    taker: &dyn Taker,
) -> Result<(Acquired<ShareHandle>, u32), LockError> {
    let no_wait = req.wait == WaitUntil::NoWait;
    let until = retry_until(req);
    // One owner for the whole acquire: a writer's intent, committed by one
    // attempt, is recognised as its own by the next.
    let owner = random_owner();
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    let mut marked = false;
    let drop_mine = {
        let (sql, name, owner) = (shares.drop_owner.clone(), name.clone(), owner.clone());
        move || {
            sqlx::query(sql.clone())
                .bind(name.clone())
                .bind(owner.clone())
        }
    };
    // Armed for the whole acquire: a committed intent is undone on any exit
    // but a win.
    let mut guard: ShareGuard = CancelGuard::new(
        Undo {
            table: shares.base.clone(),
            in_flight: None,
            make: Box::new(drop_mine) as MakeStatement,
        },
        undo,
    );
    loop {
        let one_try = async {
            let mut conn = shares.base.pool.get().await?;
            if let Some(state) = guard.state_mut() {
                state.in_flight = Some(conn.id());
            }
            let attempt = attempt(shares, req, &name, &owner, taker, &mut conn).await;
            // Answered: nothing of this attempt still runs on the server.
            if attempt.as_ref().err().is_none_or(DbError::answered)
                && let Some(state) = guard.state_mut()
            {
                state.in_flight = None;
            }
            attempt
        };
        let outcome = tokio::select! {
            biased;
            outcome = one_try => outcome,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        match outcome {
            Ok(Attempt::Won {
                token,
                slot,
                sent_at,
            }) => {
                guard.disarm();
                let handle = ShareHandle {
                    shares: shares.clone(),
                    name,
                    owner,
                    fence: token,
                };
                let token = FencingToken::new(token);
                return Ok((
                    Acquired {
                        handle,
                        token,
                        sent_at,
                    },
                    slot,
                ));
            }
            Ok(Attempt::Refuse(e)) => return Err(nothing_left(guard, marked, e)),
            Ok(Attempt::Wait {
                remaining,
                marked: now,
            }) => {
                marked |= now;
                // Never sleep past the earliest expiry: a crashed holder's share
                // is taken over as soon as the server lets us.
                let bound = remaining + Duration::from_millis(1);
                if no_wait || !backoff.pause(bound, req.wait).await {
                    return Err(nothing_left(guard, marked, req.not_acquired()));
                }
            }
            Err(e) if e.lost_to_contention() => {
                if !backoff.pause(MAX_PAUSE, until).await {
                    return Err(nothing_left(guard, marked, req.not_acquired()));
                }
            }
            Err(e) => return Err(shares.base.error(e)),
        }
    }
}

/// Gives up with `e`. The undo (deleting this acquire's rows) runs only when
/// something of it may be on the server: a committed mark, or an attempt
/// whose reply never came; an acquire that only ever read leaves nothing.
fn nothing_left(mut guard: ShareGuard, marked: bool, e: LockError) -> LockError {
    let in_flight = guard
        .state_mut()
        .is_some_and(|state| state.in_flight.is_some());
    if !marked && !in_flight {
        guard.disarm();
    }
    e
}

/// One transaction: raise the head (locking it), read the rows, and take a
/// share, mark an intent, or take nothing, as `taker` plans.
async fn attempt(
    shares: &Shares,
    req: &AcquireRequest<'_>,
    name: &[u8],
    owner: &str,
    taker: &dyn Taker,
    conn: &mut Conn,
) -> Result<Attempt, DbError> {
    let limit = shares.base.pool.timeout();
    conn.begin();
    conn.execute_text("BEGIN".into_sql_str(), limit).await?;
    let bump = sqlx::query(shares.bump_head.clone())
        .bind(name.to_vec())
        .bind(taker.permits());
    let token = conn.execute(bump).await?.last_insert_id();
    if token == 0 || token & HELD_FLAG != 0 {
        return Err(DbError::Protocol(format!(
            "the share counter returned {token}"
        )));
    }
    let rows = conn
        .fetch_all(sqlx::query(shares.rows.clone()).bind(name.to_vec()))
        .await?;
    let rows = rows
        .iter()
        .map(ShareRow::read)
        .collect::<Result<Vec<_>, _>>()?;
    let write = |slot: u32, ttl: Duration| {
        sqlx::query(shares.take.clone())
            .bind(name.to_vec())
            .bind(slot)
            .bind(owner.to_owned())
            .bind(token)
            .bind(micros(ttl))
    };
    let (outcome, end) = match taker.plan(&rows, owner.as_bytes()) {
        Plan::Refuse(e) => (Attempt::Refuse(e), "ROLLBACK"),
        Plan::Wait { remaining, mark } => match mark {
            Some((slot, ttl)) => {
                conn.execute(write(slot, ttl)).await?;
                let marked = true;
                (Attempt::Wait { remaining, marked }, "COMMIT")
            }
            None => {
                let marked = false;
                (Attempt::Wait { remaining, marked }, "ROLLBACK")
            }
        },
        Plan::Take { slot, permits } => {
            if let Some(permits) = permits {
                let set = sqlx::query(shares.set_permits.clone())
                    .bind(permits)
                    .bind(name.to_vec());
                conn.execute(set).await?;
            }
            // Expired shares are dead (a renewal needs an unexpired row): tidy
            // them away while the head lock is ours.
            if rows.iter().any(|row| row.slot != HEAD_SLOT && !row.live) {
                let expired = sqlx::query(shares.drop_expired.clone()).bind(name.to_vec());
                conn.execute(expired).await?;
            }
            let sent_at = Instant::now();
            conn.execute(write(slot, req.ttl)).await?;
            // The taker's own intent, if it marked one, is no longer needed.
            let marked = rows
                .iter()
                .any(|row| row.slot != slot && row.owner.as_deref() == Some(owner.as_bytes()));
            if marked {
                let clear = sqlx::query(shares.drop_mark.clone())
                    .bind(name.to_vec())
                    .bind(owner.to_owned())
                    .bind(slot);
                conn.execute(clear).await?;
            }
            (
                Attempt::Won {
                    token,
                    slot,
                    sent_at,
                },
                "COMMIT",
            )
        }
    };
    conn.execute_text(end.into_sql_str(), limit).await?;
    conn.transaction_ended();
    Ok(outcome)
}

/// The live share rows whose names lie in `[low, high)`: name, slot, owner,
/// token.
pub(crate) async fn live_rows(
    shares: &Shares,
    low: Vec<u8>,
    high: Vec<u8>,
) -> Result<Vec<(Vec<u8>, u32, String, u64)>, LockError> {
    let base = &shares.base;
    let found = async {
        let mut conn = base.pool.get().await?;
        let rows = conn
            .fetch_all(sqlx::query(shares.live.clone()).bind(low).bind(high))
            .await?;
        rows.iter()
            .map(|row| {
                let owner: Vec<u8> = row.try_get(2)?;
                Ok((
                    row.try_get(0)?,
                    row.try_get(1)?,
                    String::from_utf8_lossy(&owner).into_owned(),
                    row.try_get(3)?,
                ))
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DbError::Sql)
    };
    found.await.map_err(|e| base.error(e))
}

/// Deletes the live shares of `name` in slots `first..=last`, as an operator
/// would; returns how many there were.
pub(crate) async fn delete_live(
    shares: &Shares,
    name: &[u8],
    first: u32,
    last: u32,
) -> Result<u64, LockError> {
    let statement = || {
        sqlx::query(shares.delete_live.clone())
            .bind(name.to_vec())
            .bind(first)
            .bind(last)
    };
    shares.base.run_settled(statement).await
}
