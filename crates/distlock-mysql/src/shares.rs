//! What the semaphore and the read-write lock share: a table of expiring share
//! rows under one head row per name, its statements, the held share's renew
//! and release, and inspection (the transaction that takes a share is in
//! `share_take`).
//!
//! Layout (one table per primitive, same shape): the head row (`slot` =
//! [`HEAD_SLOT`]) of a name holds the fencing counter in `fence` and, for a
//! semaphore, the limit in `permits`; every other row is one share (a permit,
//! a read or write share, a waiter's place) with its `owner`, its token (a
//! waiter's: its arrival ticket) in `fence` and its expiry on the server clock.
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

use crate::backend::{Table, micros};
use crate::error::{BACKEND, DbError};
use crate::keys::TableName;
use crate::protocol::for_table;
use async_trait::async_trait;
use distlock_core::LockError;
use distlock_core::adapter::{Holding, Ownership};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row, SqlSafeStr, SqlStr};
use std::sync::Arc;
use std::time::Duration;

/// The semaphore table's name: the lock table's plus this.
pub(crate) const SEMAPHORE_TABLE: &str = "_sem";
/// The read-write lock table's name: the lock table's plus this.
pub(crate) const RWLOCK_TABLE: &str = "_rw";

/// The head row's slot: above every share's.
pub(crate) const HEAD_SLOT: u32 = u32::MAX;

const CREATE: &str = include_str!("sql/shares_create_table.sql");
const BUMP_HEAD: &str = include_str!("sql/shares_bump_head.sql");
const ROWS: &str = include_str!("sql/shares_rows.sql");
const PEEK: &str = include_str!("sql/shares_peek.sql");
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
    pub bump_head: SqlStr,
    pub rows: SqlStr,
    /// [`ROWS`] without locks: a waiter's look before it takes the head lock.
    pub peek: SqlStr,
    pub set_permits: SqlStr,
    pub take: SqlStr,
    pub renew: SqlStr,
    pub release: SqlStr,
    pub drop_owner: SqlStr,
    pub drop_mark: SqlStr,
    pub drop_expired: SqlStr,
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
            peek: build(PEEK),
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
    /// A share's token; a waiter's place: its arrival ticket.
    pub fence: u64,
}

impl ShareRow {
    pub fn read(row: &MySqlRow) -> Result<ShareRow, DbError> {
        let live: i64 = row.try_get(3)?;
        let remaining: i64 = row.try_get(4)?;
        Ok(ShareRow {
            slot: row.try_get(0)?,
            permits: row.try_get(1)?,
            owner: row.try_get(2)?,
            live: live != 0,
            remaining: Duration::from_micros(u64::try_from(remaining).unwrap_or(0)),
            fence: row.try_get(5)?,
        })
    }
}

/// What a taker decided from the rows.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Take `slot`; first set the head's limit to `permits` when given.
    Take { slot: u32, permits: Option<u32> },
    /// No room for about `remaining`; `mark` is a row to hold meanwhile (a
    /// waiter's place in the queue), kept by committing.
    Wait {
        remaining: Duration,
        mark: Option<Mark>,
    },
    /// Give up with this error.
    Refuse(LockError),
}

/// A waiter's row: its slot, how long it lives unless written again, and its
/// arrival ticket (`None`: this attempt's token, for a first mark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub slot: u32,
    pub ttl: Duration,
    pub ticket: Option<u64>,
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
    pub shares: Arc<Shares>,
    pub name: Vec<u8>,
    pub owner: String,
    pub fence: u64,
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
