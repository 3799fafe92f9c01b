//! The semaphore and the read-write lock of both SQL adapters, written once: a
//! table of expiring share rows under one head row per name, its statements,
//! the held share's renew and release, and inspection (the transaction that
//! takes a share is in `take`; each primitive's rules in `semaphore` and
//! `rwlock`). Not a stable API.
//!
//! Layout (one table per primitive, `{table}_sem` and `{table}_rw`, same
//! shape): the head row (`slot` = [`HEAD_SLOT`]) of a name holds the fencing
//! counter in `fence`, for a semaphore the limit in `permits`, and in
//! `expires_at` the latest expiry any grant gave a share of the name (from
//! which `state` judges the name idle); every
//! other row is one share (a permit, a read or write share, a waiter's place)
//! with its `owner`, its token (a waiter's: its arrival ticket) in `fence` and
//! its expiry on the server clock. A name is the adapter's key: MySQL's
//! binary row name, PostgreSQL's namespace and name.
//!
//! Invariants:
//! - Every taking transaction first raises the head row's counter, which locks
//!   the head (a name without one gets it first, created above the
//!   namespace's floor by `state`'s collecting transaction): takers of one name are serialized, and each sees every share the
//!   ones before it committed. The token is the raised counter, so tokens rise
//!   per name across all shares of every kind.
//! - A share row is written only by a taker holding the head lock, renewed only
//!   while unexpired (by the server clock), so a share seen expired stays
//!   expired and can be overwritten; release and operator deletes remove rows
//!   (on PostgreSQL they also notify the name's waiters).
//! - Refused statements (deadlock, lock wait timeout) end the transaction by
//!   closing the connection, and the attempt is tried again within the
//!   caller's wait.

mod db;
pub mod rwlock;
pub mod semaphore;
mod take;

pub use crate::table::{Names, Primitive, Value};
pub use db::{ShareDb, ShareSql};

use crate::adapter::TableName;
use crate::db::Steps;
use crate::db_error::DbError;
use crate::pool::PoolDialect;
use crate::state::{self, Collector, StateDb};
use crate::table::{Db, LockTable, TableDb, compare_owner, micros, render, run_settled, statement};
use async_trait::async_trait;
use distlock_core::adapter::{Holding, Ownership};
use distlock_core::{LockError, LockKey};
use sqlx::SqlStr;
use std::sync::Arc;
use std::time::Duration;

/// The head row's slot: above every share's.
pub const HEAD_SLOT: u32 = u32::MAX;

/// A lock table whose database runs the share tables' steps.
pub trait ShareAdapter: LockTable<Dialect: PoolDialect<Database: ShareDb + StateDb>> {}

impl<T: LockTable<Dialect: PoolDialect<Database: ShareDb + StateDb>>> ShareAdapter for T {}

/// The share table of one primitive: its adapter and statements.
#[derive(Debug)]
pub struct Shares<A: ShareAdapter> {
    /// The adapter.
    pub base: Arc<A>,
    primitive: Primitive,
    bump_head: SqlStr,
    insert_head: SqlStr,
    collector: Collector,
    rows: SqlStr,
    peek: SqlStr,
    set_permits: SqlStr,
    take: SqlStr,
    renew: SqlStr,
    release: SqlStr,
    drop_owner: SqlStr,
    drop_mark: SqlStr,
    drop_expired: SqlStr,
    live: SqlStr,
    delete_live: SqlStr,
}

impl<A: ShareAdapter> Shares<A> {
    /// The share table of `primitive` beside the lock table `lock_table`,
    /// created first when `create`, its heads collected once idle for
    /// `state_ttl`.
    pub async fn open(
        base: Arc<A>,
        lock_table: &str,
        primitive: Primitive,
        create: bool,
        state_ttl: Duration,
    ) -> Result<Arc<Self>, LockError> {
        let suffix = primitive.suffix();
        let derived = format!("{lock_table}{suffix}");
        let name = TableName::<Db<A>>::new(&derived).map_err(|_| {
            LockError::config(
                <Db<A> as crate::SqlDatabase>::BACKEND,
                format!(
                    "the table `{derived}` (the lock table's name plus `{suffix}`) is not a valid table \
                     name; choose a lock table name of at most {} characters",
                    <Db<A> as ShareDb>::IDENT_MAX - suffix.len()
                ),
            )
        })?;
        let comment = format!("distlock:{}", suffix.trim_start_matches('_'));
        let names = [
            ("table", name.as_str()),
            ("comment", &comment),
            ("channel", lock_table),
            ("kind", primitive.word()),
        ];
        let sql = |template| render(template, &names);
        let all = &<Db<A> as ShareDb>::SHARES;
        if create {
            let created = async {
                let mut conn = Db::<A>::connection(base.pool()).await?;
                match Db::<A>::run(&mut conn, sqlx::query(sql(all.create))).await {
                    Err(DbError::Sql(e)) if Db::<A>::lost_creation_race(&e) => Ok(0),
                    other => other,
                }
            };
            created.await.map_err(|e| base.pool().error(e))?;
        }
        let namespace = base.namespace();
        let index = <Db<A> as StateDb>::STATE.index;
        let prepared = state::prepare(
            base.pool(),
            name.as_str(),
            lock_table,
            namespace,
            create,
            index,
        );
        prepared.await.map_err(|e| base.pool().error(e))?;
        Ok(Arc::new(Shares {
            primitive,
            bump_head: sql(all.bump_head),
            insert_head: sql(all.insert_head),
            collector: Collector::new::<Db<A>>(name.as_str(), lock_table, state_ttl),
            rows: sql(all.rows),
            peek: sql(all.peek),
            set_permits: sql(all.set_permits),
            take: sql(all.take),
            renew: sql(all.renew),
            release: sql(all.release),
            drop_owner: sql(all.drop_owner),
            drop_mark: sql(all.drop_mark),
            drop_expired: sql(all.drop_expired),
            live: sql(all.live),
            delete_live: sql(all.delete_live),
            base,
        }))
    }

    /// The public error for a failed statement.
    fn error(&self, e: DbError) -> LockError {
        self.base.pool().error(e)
    }

    /// The backend's name.
    fn backend(&self) -> &'static str {
        <A::Dialect as PoolDialect>::TEXTS.backend
    }

    /// The live shares of `names`.
    async fn live_rows(&self, names: Names<'_>) -> Result<Vec<LiveRow>, LockError> {
        let read = statement::<Db<A>>(&self.live, &self.base.names(names));
        let found = async {
            let mut conn = Db::<A>::connection(self.base.pool()).await?;
            Db::<A>::live_rows(&mut conn, read).await
        };
        found.await.map_err(|e| self.error(e))
    }

    /// Deletes the live shares of `key` in slots `first..=last`, as an
    /// operator would; returns how many there were.
    async fn delete_live(&self, key: &LockKey, first: u32, last: u32) -> Result<u64, LockError> {
        let mut values = self.base.key(key);
        values.extend([Value::Int(first.into()), Value::Int(last.into())]);
        let delete = || statement::<Db<A>>(&self.delete_live, &values);
        let pool = self.base.pool();
        run_settled(pool, delete).await.map_err(|e| pool.error(e))
    }
}

/// One row of a name as a taker sees it.
#[derive(Debug)]
pub struct ShareRow {
    /// Its slot.
    pub slot: u32,
    /// The head's limit (a semaphore's).
    pub permits: Option<u32>,
    /// A share's or place's owner.
    pub owner: Option<Vec<u8>>,
    /// A share or place (never the head) unexpired by the server clock.
    pub live: bool,
    /// Time left by the server clock.
    pub remaining: Duration,
    /// A share's token; a waiter's place: its arrival ticket.
    pub fence: u64,
}

/// A live share as inspection reads it.
#[derive(Debug)]
pub struct LiveRow {
    /// Its name, for messages.
    pub name: String,
    /// Its slot.
    pub slot: u32,
    /// Its owner.
    pub owner: String,
    /// Its token.
    pub fence: u64,
}

/// What a taker decided from the rows.
#[derive(Debug)]
pub enum Plan {
    /// Take `slot`; first set the head's limit to `permits` when given.
    Take {
        /// The slot.
        slot: u32,
        /// The new limit.
        permits: Option<u32>,
    },
    /// No room for about `remaining`; `mark` is a row to hold meanwhile (a
    /// waiter's place in the queue), kept by committing.
    Wait {
        /// Until the first blocker expires.
        remaining: Duration,
        /// The place to keep.
        mark: Option<Mark>,
    },
    /// Give up with this error.
    Refuse(LockError),
}

/// A waiter's row: its slot, how long it lives unless written again, and its
/// arrival ticket (`None`: this attempt's token, for a first mark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Its slot.
    pub slot: u32,
    /// Its life.
    pub ttl: Duration,
    /// Its ticket.
    pub ticket: Option<u64>,
}

/// One primitive's rules for taking a share.
pub trait Taker: Send + Sync {
    /// The head's `permits` when it is created.
    fn permits(&self) -> Option<u32>;
    /// Where the share goes, given every row of the name and this attempt's
    /// owner (and earlier attempts' owners of this acquire: the caller's own
    /// mark).
    fn plan(&self, rows: &[ShareRow], mine: &[u8]) -> Plan;
}

/// A held share: its table, name, owner and token.
#[derive(Debug)]
pub struct ShareHandle<A: ShareAdapter> {
    shares: Arc<Shares<A>>,
    key: Vec<Value>,
    owner: Arc<str>,
    fence: u64,
}

impl<A: ShareAdapter> ShareHandle<A> {
    /// The values naming this share's row (key, owner, token).
    fn row(&self) -> Vec<Value> {
        let mut values = self.key.clone();
        values.extend([Value::Text(self.owner.clone()), Value::Int(self.fence)]);
        values
    }
}

#[async_trait]
impl<A: ShareAdapter> Holding for ShareHandle<A> {
    fn backend_name(&self) -> &'static str {
        self.shares.backend()
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        let shares = &self.shares;
        let mut values = vec![Value::Int(micros(ttl))];
        values.extend(self.row());
        let renew = || statement::<Db<A>>(&shares.renew, &values);
        compare_owner(shares.base.pool(), renew).await
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let shares = &self.shares;
        let release = || statement::<Db<A>>(&shares.release, &self.row());
        compare_owner(shares.base.pool(), release).await
    }
}

/// A binary name for messages: its text, with bytes that are not UTF-8 escaped.
pub fn display_name(name: &[u8]) -> String {
    name.utf8_chunks()
        .flat_map(|chunk| {
            let bad = chunk.invalid().iter().map(|b| format!("\\x{b:02x}"));
            std::iter::once(chunk.valid().escape_debug().to_string()).chain(bad)
        })
        .collect()
}
