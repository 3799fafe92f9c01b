//! Bounded per-name state, written once for both databases: a name's lock
//! row (`version_cas`) and its share heads are deleted once the name has been
//! idle (not held) for `state_ttl`, and tokens still only rise. Not a stable
//! API.
//!
//! - **Idle**: `expires_at` older than `state_ttl`, or NULL (a row the
//!   previous release left). A lock row's `expires_at` is its last lease's
//!   expiry or the instant of its release; a head's is the latest expiry any
//!   grant gave a share of its name. An index on `expires_at` bounds the
//!   search.
//! - **Collection** needs no extra process and never scans all names: the
//!   transaction that creates a name's row (a lock row, a share head) first
//!   deletes at most [`SWEEP`] idle rows of its table and namespace, when it
//!   finds any. New rows
//!   are what makes state grow, so every one pays for up to [`SWEEP`] old ones.
//! - **Tokens never go back**: that transaction locks the namespace's
//!   high-water row (`{table}_hw` beside the lock table, column `floor`),
//!   raises it to the highest fence among the rows it may delete, deletes
//!   only rows whose fence is at most the floor, and seeds the new row at the
//!   higher of the server clock in µs and floor + 1. A creation that deletes
//!   nothing reads the floor under a shared lock. So every deletion excludes
//!   every other creation and deletion of the namespace until it commits, and
//!   a locking read sees the latest commit on both databases: a creation that
//!   waited for a deletion reads the raised floor.

mod schema;

pub use schema::{Addition, HOLDER_COLUMN, add_column, no_column, prepare};

use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect, Statement};
use crate::table::{Db, LockTable, Names, Primitive, TableDb, Value, micros, render, statement};
use distlock_core::LockError;
use sqlx::{MySql, Postgres, Row, SqlStr};
use std::time::Duration;

/// At most this many idle rows are deleted by one new row's transaction: more
/// than one, so collection outpaces creation, and few, so it stays short.
pub const SWEEP: u64 = 16;

/// The statements of bounded state on one database. `{table}` is the table
/// whose rows are collected (the lock table, a share table), `{hw}` the
/// high-water table beside the lock table.
#[derive(Debug)]
pub struct StateSql {
    /// Creates the high-water table.
    pub create: &'static str,
    /// Creates the namespace's high-water row, once. Binds: namespace.
    pub seed: &'static str,
    /// The index on `expires_at` that bounds the search for idle rows.
    pub index: Addition,
    /// Locks the high-water row and reads the floor, to raise it. Binds:
    /// namespace.
    pub lock_floor: &'static str,
    /// Reads the floor under a shared lock (creations without collection
    /// share it, collections wait for them). Binds: namespace.
    pub share_floor: &'static str,
    /// The highest fence among at most `limit` idle rows. Binds: namespace,
    /// `state_ttl` µs, limit.
    pub idle_max: &'static str,
    /// Raises the floor. Binds: namespace, fence.
    pub raise: &'static str,
    /// Deletes at most `limit` idle rows whose fence is at most the floor.
    /// Binds: namespace, `state_ttl` µs, floor, limit.
    pub sweep: &'static str,
    /// Counts the rows of names under a prefix. Binds: names.
    pub count: &'static str,
    /// The lock table's `holder` column.
    pub holder: Addition,
}

/// A database whose lock rows are collected.
pub trait StateDb: TableDb {
    /// Its statements.
    const STATE: StateSql;

    /// Decodes a row's first column, a count or a fence (NULL for none).
    fn number(row: &Self::Row) -> Result<Option<u64>, sqlx::Error>;
}

impl StateDb for MySql {
    const STATE: StateSql = StateSql {
        create: include_str!("../sql/mysql/state_create.sql"),
        seed: include_str!("../sql/mysql/state_seed.sql"),
        index: Addition {
            has: include_str!("../sql/mysql/state_has_index.sql"),
            add: include_str!("../sql/mysql/state_add_index.sql"),
        },
        lock_floor: include_str!("../sql/mysql/state_lock_floor.sql"),
        share_floor: include_str!("../sql/mysql/state_share_floor.sql"),
        idle_max: include_str!("../sql/mysql/state_idle_max.sql"),
        raise: include_str!("../sql/mysql/state_raise.sql"),
        sweep: include_str!("../sql/mysql/state_sweep.sql"),
        count: include_str!("../sql/mysql/state_count.sql"),
        holder: Addition {
            has: include_str!("../sql/mysql/holder_has_column.sql"),
            add: include_str!("../sql/mysql/holder_add_column.sql"),
        },
    };

    fn number(row: &<MySql as sqlx::Database>::Row) -> Result<Option<u64>, sqlx::Error> {
        row.try_get(0)
    }
}

impl StateDb for Postgres {
    const STATE: StateSql = StateSql {
        create: include_str!("../sql/postgres/state_create.sql"),
        seed: include_str!("../sql/postgres/state_seed.sql"),
        index: Addition {
            has: include_str!("../sql/postgres/state_has_index.sql"),
            add: include_str!("../sql/postgres/state_add_index.sql"),
        },
        lock_floor: include_str!("../sql/postgres/state_lock_floor.sql"),
        share_floor: include_str!("../sql/postgres/state_share_floor.sql"),
        idle_max: include_str!("../sql/postgres/state_idle_max.sql"),
        raise: include_str!("../sql/postgres/state_raise.sql"),
        sweep: include_str!("../sql/postgres/state_sweep.sql"),
        count: include_str!("../sql/postgres/state_count.sql"),
        holder: Addition {
            has: include_str!("../sql/postgres/holder_has_column.sql"),
            add: include_str!("../sql/postgres/holder_add_column.sql"),
        },
    };

    fn number(row: &<Postgres as sqlx::Database>::Row) -> Result<Option<u64>, sqlx::Error> {
        let n: Option<i64> = row.try_get(0)?;
        Ok(n.map(|n| u64::try_from(n).unwrap_or(0)))
    }
}

/// How a table's idle rows are found and deleted, as templates over
/// `{table}` and `{hw}` with [`StateSql::idle_max`]'s and
/// [`StateSql::sweep`]'s binds. A table whose rows are counters of locks held
/// by sessions brings its own, which also skip the names a session holds.
#[derive(Debug, Clone, Copy)]
pub struct Idle {
    /// The highest fence among at most `limit` idle rows.
    pub max: &'static str,
    /// Deletes at most `limit` idle rows whose fence is at most the floor.
    pub sweep: &'static str,
}

/// The bounded-state statements of one lock table, rendered once, and the
/// client's `state_ttl`.
#[derive(Debug, Clone)]
pub struct Collector {
    lock_floor: SqlStr,
    share_floor: SqlStr,
    idle_max: SqlStr,
    raise: SqlStr,
    sweep: SqlStr,
    state_ttl: Duration,
}

impl Collector {
    /// The statements that collect rows of `table` idle for `state_ttl`,
    /// under the floor of the lock table `lock_table`.
    pub fn new<DB: StateDb>(table: &str, lock_table: &str, state_ttl: Duration) -> Self {
        let idle = Idle {
            max: DB::STATE.idle_max,
            sweep: DB::STATE.sweep,
        };
        Self::with_idle::<DB>(table, lock_table, state_ttl, idle)
    }

    /// As [`Collector::new`], with rows idle as `idle` says.
    pub fn with_idle<DB: StateDb>(
        table: &str,
        lock_table: &str,
        state_ttl: Duration,
        idle: Idle,
    ) -> Self {
        let hw = high_water(lock_table);
        let sql = |template| render(template, &[("table", table), ("hw", &hw)]);
        let all = &DB::STATE;
        Collector {
            lock_floor: sql(all.lock_floor),
            share_floor: sql(all.share_floor),
            idle_max: sql(idle.max),
            raise: sql(all.raise),
            sweep: sql(idle.sweep),
            state_ttl,
        }
    }

    /// Creates a name's row in one transaction on `conn`, as
    /// [`Collector::create_within`] does.
    pub async fn create_row<A: StateTable>(
        &self,
        table: &A,
        conn: &mut Conn<A::Dialect>,
        insert: impl FnOnce(u64) -> Statement<Db<A>>,
    ) -> Result<(), DbError> {
        let limit = table.pool().timeout();
        conn.may_hold();
        Db::<A>::text(conn, Db::<A>::BEGIN, limit).await?;
        self.create_within(table, conn, insert).await?;
        Db::<A>::text(conn, "COMMIT", limit).await?;
        conn.holds_nothing();
        Ok(())
    }

    /// Creates a name's row inside the transaction open on `conn`: looks for
    /// idle rows; if there are any, locks the namespace's floor and collects
    /// up to [`SWEEP`] of them (raising the floor above their fences first),
    /// otherwise reads the floor under a shared lock; then runs
    /// `insert(floor)`, which seeds the row above the floor.
    pub async fn create_within<A: StateTable>(
        &self,
        table: &A,
        conn: &mut Conn<A::Dialect>,
        insert: impl FnOnce(u64) -> Statement<Db<A>>,
    ) -> Result<(), DbError> {
        let with = |more: &[Value]| [table.namespace(), more.to_vec()].concat();
        let ttl = Value::Int(micros(self.state_ttl));
        // Looked for without locks: most creations find nothing idle and
        // only share the floor's lock with each other.
        let idle = statement(&self.idle_max, &with(&[ttl.clone(), Value::Int(SWEEP)]));
        let floor = match number(conn, idle).await? {
            None => self.floor(table, conn, false).await?,
            Some(highest) => {
                let floor = self.floor(table, conn, true).await?;
                let floor = self.raise(table, conn, floor, highest).await?;
                let values = [ttl, Value::Int(floor), Value::Int(SWEEP)];
                Db::<A>::run(conn, statement(&self.sweep, &with(&values))).await?;
                floor
            }
        };
        Db::<A>::run(conn, insert(floor)).await?;
        Ok(())
    }

    /// The namespace's floor, read on `conn`: under an exclusive lock when
    /// `raising` (inside the transaction that raises it and deletes rows), or
    /// else a shared one. Outside a transaction, a shared read waits until
    /// every collection running now has committed.
    pub async fn floor<A: StateTable>(
        &self,
        table: &A,
        conn: &mut Conn<A::Dialect>,
        raising: bool,
    ) -> Result<u64, DbError> {
        let read = [&self.share_floor, &self.lock_floor][usize::from(raising)];
        let floor = number(conn, statement(read, &table.namespace())).await?;
        floor.ok_or_else(|| {
            DbError::Protocol(
                "the namespace's high-water row is missing; connect again to create it".into(),
            )
        })
    }

    /// Raises the floor, locked on `conn` at `floor`, to `highest` if that is
    /// above it; the floor now.
    pub async fn raise<A: StateTable>(
        &self,
        table: &A,
        conn: &mut Conn<A::Dialect>,
        floor: u64,
        highest: u64,
    ) -> Result<u64, DbError> {
        if highest <= floor {
            return Ok(floor);
        }
        let mut values = table.namespace();
        values.push(Value::Int(highest));
        Db::<A>::run(conn, statement(&self.raise, &values)).await?;
        Ok(highest)
    }
}

/// A lock table whose database collects idle rows.
pub trait StateTable: LockTable<Dialect: PoolDialect<Database: StateDb>> {}

impl<T: LockTable<Dialect: PoolDialect<Database: StateDb>>> StateTable for T {}

/// Runs `query` and decodes its first row's first column.
pub(crate) async fn number<D: PoolDialect<Database: StateDb>>(
    conn: &mut Conn<D>,
    query: Statement<D::Database>,
) -> Result<Option<u64>, DbError> {
    let rows = D::Database::fetch_all(conn, query).await?;
    let first = rows.first().map(D::Database::number).transpose();
    Ok(first.map_err(DbError::Sql)?.flatten())
}

/// How many rows the names under `prefix` have in the lock table
/// `lock_table` and, when `shares`, its share tables: the per-name state
/// collection bounds.
pub async fn records<A: StateTable>(
    table: &A,
    lock_table: &str,
    prefix: &str,
    shares: bool,
) -> Result<usize, LockError> {
    let mut total = 0;
    let share_tables =
        [Primitive::Semaphore, Primitive::RwLock].map(|p| format!("{lock_table}{}", p.suffix()));
    let share_tables = share_tables.into_iter().filter(|_| shares);
    let tables = [lock_table.to_owned()].into_iter().chain(share_tables);
    for name in tables {
        let count = render(<Db<A> as StateDb>::STATE.count, &[("table", &name)]);
        let counted = async {
            let mut conn = Db::<A>::connection(table.pool()).await?;
            number(
                &mut conn,
                statement(&count, &table.names(Names::Under(prefix))),
            )
            .await
        };
        let counted = counted.await.map_err(|e| table.pool().error(e))?;
        total += usize::try_from(counted.unwrap_or(0)).unwrap_or(usize::MAX);
    }
    Ok(total)
}

/// The high-water table beside `lock_table`.
pub(crate) fn high_water(lock_table: &str) -> String {
    format!("{lock_table}_hw")
}
