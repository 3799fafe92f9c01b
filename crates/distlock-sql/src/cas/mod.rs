//! `version_cas`, written once for both databases: the row persists and its
//! `fence` column is the version. Not a stable API.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the
//! same statement (which hands the token back in the same round trip: MySQL's
//! `LAST_INSERT_ID(fence + 1)`, PostgreSQL's `RETURNING fence`), so every
//! holder's token exceeds every earlier holder's. Release clears `owner` and
//! stamps `expires_at` with its instant but keeps the row (on PostgreSQL it
//! notifies the table's channel in the same statement when a waiter marked
//! the name, see [`crate::table::Wake`], and commits without
//! waiting for the WAL flush: a release lost by a crash leaves the row held
//! until it expires, and the fence untouched); a row idle for
//! `state_ttl` is deleted only by `state`'s collection, which keeps the fence
//! rising across it. In steady state a cycle is two
//! statements: the CAS and the release (the row insert runs only when the CAS
//! found no row). Waiting is `poll`'s, each attempt with an owner value of
//! its own.

mod db;

pub use db::{CasDb, CasSql, HELD_FLAG, HolderRow, Reply, held_for, mysql_reply};

use crate::db_error::DbError;
use crate::poll::{Attempt, Bid, Contender, OwnerChecked, Polling, floor_cycle};
use crate::pool::{Conn, PoolDialect, Statement};
use crate::state::Collector;
use crate::table::bell::{Doorbell, Rung};
use crate::table::{Db, LockTable, Names, TableDb, Value, micros, render, run_settled, statement};
use async_trait::async_trait;
use distlock_core::toolkit::Holder;
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use sqlx::SqlStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;

/// A lock table whose database runs `version_cas`.
pub trait CasTable: LockTable<Dialect: PoolDialect<Database: CasDb>> {}

impl<T: LockTable<Dialect: PoolDialect<Database: CasDb>>> CasTable for T {}

/// The `version_cas` statements of one lock table, rendered once.
#[derive(Debug, Clone)]
pub struct CasStatements {
    rows: OwnerChecked,
    cas: Cas,
    holder_row: SqlStr,
    owned_rows: SqlStr,
    clear_owner: SqlStr,
}

impl CasStatements {
    /// The statements of `lock_table` on `DB`, collecting rows idle for
    /// `state_ttl`.
    pub fn new<DB: CasDb>(lock_table: &str, state_ttl: Duration) -> Self {
        let names = [("table", lock_table), ("channel", lock_table)];
        let sql = |template| render(template, &names);
        let all = &DB::CAS;
        CasStatements {
            rows: OwnerChecked {
                renew: sql(all.renew),
                release: sql(all.release),
                abandon: sql(all.abandon),
                with_fence: true,
            },
            cas: Cas {
                acquire: sql(all.acquire),
                acquire_belled: all.acquire_belled.map(sql),
                insert_row: sql(all.insert_row),
                collector: Collector::with_idle::<DB>(lock_table, lock_table, state_ttl, all.idle),
            },
            holder_row: sql(all.holder_row),
            owned_rows: sql(all.owned_rows),
            clear_owner: sql(all.clear_owner),
        }
    }

    /// A `version_cas` client's backend on `table`.
    pub fn backend<A: CasTable>(&self, table: Arc<A>) -> Polling<A, Cas> {
        Polling::new(table, self.cas.clone(), self.rows.clone())
    }

    /// One CAS and the release, on one connection, as a benchmark's floor:
    /// `Ok(false)` when the row was held.
    pub async fn floor_cycle<A: CasTable>(
        &self,
        table: &A,
        key: &LockKey,
        ttl: Duration,
    ) -> Result<bool, DbError> {
        floor_cycle(table, &self.cas, &self.rows, key, ttl).await
    }

    /// The live holder of `key`'s row: its owner, token and time left.
    pub async fn holder<A: CasTable>(
        &self,
        table: &A,
        key: &LockKey,
    ) -> Result<Option<Holder>, LockError> {
        let read = statement(&self.holder_row, &table.key(key));
        let found = async {
            let rows = fetch_all(table, read).await?;
            let first = rows.first().map(Db::<A>::holder_row).transpose();
            first.map_err(DbError::Sql)
        };
        let found = found.await.map_err(|e| table.pool().error(e))?;
        Ok(found.map(|found| {
            let token = found.fence.map(FencingToken::new);
            let meta = found.meta.as_deref().and_then(HolderMeta::decode);
            Holder::new(found.owner, token, Some(found.remaining)).with_meta(meta)
        }))
    }

    /// Every owned row under `prefix`, as residue lines; an expired owner
    /// counts too when `expired_too` (a row that exists only while held).
    pub async fn residue<A: CasTable>(
        &self,
        table: &A,
        prefix: &str,
        expired_too: bool,
    ) -> Result<Vec<String>, LockError> {
        let mut values = table.names(Names::Under(prefix));
        values.push(Value::Flag(expired_too));
        let found = async {
            let rows = fetch_all(table, statement(&self.owned_rows, &values)).await?;
            let owned = rows.iter().map(Db::<A>::owned_row);
            owned.collect::<Result<Vec<_>, _>>().map_err(DbError::Sql)
        };
        let found = found.await.map_err(|e| table.pool().error(e))?;
        let line = |(name, owner)| format!("row `{name}` owned by {owner}");
        Ok(found.into_iter().map(line).collect())
    }

    /// An operator's force-unlock: clears the owner of `key`'s row. The fence
    /// stays in the row, so the next holder's token is higher.
    pub async fn clear_owner<A: CasTable>(
        &self,
        table: &A,
        key: &LockKey,
    ) -> Result<bool, LockError> {
        let values = table.key(key);
        let clear = || statement(&self.clear_owner, &values);
        let pool = table.pool();
        Ok(run_settled(pool, clear).await.map_err(|e| pool.error(e))? > 0)
    }
}

/// Runs `read` on a connection of `table`'s pool.
async fn fetch_all<A: LockTable>(
    table: &A,
    read: Statement<Db<A>>,
) -> Result<Vec<<Db<A> as sqlx::Database>::Row>, DbError> {
    let mut conn = Db::<A>::connection(table.pool()).await?;
    Db::<A>::fetch_all(&mut conn, read).await
}

/// `version_cas`'s attempts: the CAS, creating the row first when it has
/// none (collecting idle rows in the same transaction).
#[derive(Debug, Clone)]
pub struct Cas {
    acquire: SqlStr,
    acquire_belled: Option<SqlStr>,
    insert_row: SqlStr,
    collector: Collector,
}

impl Cas {
    /// The CAS's values: owner, metadata, ttl µs, the row.
    fn values(bid: &Bid<'_>) -> Vec<Value> {
        let bids = [
            Value::Text(bid.owner.clone()),
            Value::Text(bid.meta.clone()),
            Value::Int(micros(bid.ttl)),
        ];
        bid.values(&bids, &[])
    }

    /// Creates the name's missing row (fence seeded above the floor and the
    /// server clock).
    async fn create_row<A: CasTable>(
        &self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
    ) -> Result<(), DbError> {
        let insert = |floor| statement(&self.insert_row, &bid.values(&[], &[Value::Int(floor)]));
        self.collector.create_row(table, conn, insert).await
    }
}

#[async_trait]
impl<A: CasTable> Contender<A> for Cas {
    async fn attempt(
        &mut self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
    ) -> Result<Attempt, DbError> {
        for _ in 0..ROW_INSERTS {
            let sent_at = Instant::now();
            let cas = statement(&self.acquire, &Cas::values(bid));
            match Db::<A>::cas(conn, cas).await? {
                Reply::Won(token) => return Ok(Attempt::Won { token, sent_at }),
                Reply::Held(remaining) => return Ok(Attempt::Held { remaining }),
                // No row yet: create it and CAS again.
                Reply::NoRow => self.create_row(table, bid, conn).await?,
            }
        }
        Ok(Attempt::Held {
            remaining: Duration::ZERO,
        })
    }

    /// The bell's wait and the CAS in one round trip (MySQL's: the doorbell's
    /// database); the lease counts from the wait's end. Without a row yet, the
    /// row is created and the plain attempts go on.
    async fn attempt_belled(
        &mut self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
        bell: &dyn Doorbell<A::Dialect>,
        bound: Duration,
    ) -> Result<(Attempt, Rung), DbError> {
        let sent = Instant::now();
        let values = Cas::values(bid);
        let cas = self.acquire_belled.as_ref().unwrap_or(&self.acquire);
        let rung = bell.ring(conn, bid.key, bound, Some((cas, &values)));
        let rung = rung.await?;
        let (id, matched) = rung
            .answer
            .ok_or_else(|| DbError::Protocol("the doorbell's CAS did not answer".into()))?;
        let attempt = match mysql_reply(id, matched)? {
            Reply::Won(token) => Attempt::Won {
                token,
                sent_at: sent + rung.waited,
            },
            Reply::Held(remaining) => Attempt::Held { remaining },
            Reply::NoRow => {
                self.create_row(table, bid, conn).await?;
                self.attempt(table, bid, conn).await?
            }
        };
        Ok((attempt, rung))
    }
}
