//! What tables of earlier releases lack, added at connect: bounded state's
//! high-water table and index, and later columns (`holder`, `used_at`).

use super::{StateDb, high_water, number};
use crate::db::BoxFuture;
use crate::db_error::DbError;
use crate::pool::{Pool, PoolDialect};
use crate::table::{TableDb, Value, render, statement};

/// A part of a table's schema that tables of earlier releases lack: a count
/// that finds it, and the statement that adds it.
#[derive(Debug, Clone, Copy)]
pub struct Addition {
    /// Counts it (0: missing).
    pub has: &'static str,
    /// Adds it.
    pub add: &'static str,
}

/// The `holder` column, as an error names it ([`no_column`]).
pub const HOLDER_COLUMN: &str = "`holder` column (who holds a lock: host, pid, label)";

/// MySQL's "duplicate key name": another client added the index first.
const DUPLICATE_INDEX: u16 = 1061;
/// MySQL's "duplicate column name": another client added the column first.
const DUPLICATE_COLUMN: u16 = 1060;

/// Whether `error` is another client having just created the same table or
/// index.
fn lost_race<DB: StateDb>(error: &DbError) -> bool {
    match error {
        DbError::Sql(e) if DB::lost_creation_race(e) => true,
        e => matches!(e.number(), Some(DUPLICATE_INDEX | DUPLICATE_COLUMN)),
    }
}

/// Adds what bounded state needs to `table` at connect, idempotently: the
/// high-water table beside the lock table `lock_table` and `table`'s `index`
/// that finds idle rows (when `create`: tables made by hand get them by
/// hand), and `namespace`'s high-water row.
pub fn prepare<'a, D: PoolDialect<Database: StateDb>>(
    pool: &'a Pool<D>,
    table: &'a str,
    lock_table: &'a str,
    namespace: Vec<Value>,
    create: bool,
    index: Addition,
) -> BoxFuture<'a, Result<(), DbError>> {
    Box::pin(async move {
        let hw = high_water(lock_table);
        let sql = |template| render(template, &[("table", table), ("hw", &hw)]);
        let all = &D::Database::STATE;
        let mut conn = D::Database::connection(pool).await?;
        let tolerate = |done: Result<u64, DbError>| match done {
            Err(e) if !lost_race::<D::Database>(&e) => Err(e),
            _ => Ok(()),
        };
        if create {
            tolerate(D::Database::run(&mut conn, statement(&sql(all.create), &[])).await)?;
        }
        let has_index = number(&mut conn, statement(&sql(index.has), &[])).await?;
        if create && has_index == Some(0) {
            tolerate(D::Database::run(&mut conn, statement(&sql(index.add), &[])).await)?;
        }
        D::Database::run(&mut conn, statement(&sql(all.seed), &namespace)).await?;
        Ok(())
    })
}

/// Gives the lock table `table` a `column` that tables of earlier releases
/// lack, at connect: added when `create`; otherwise (a table made by hand)
/// `Ok(Some(statement))`, the statement that adds it, for the adapter's
/// error ([`no_column`]).
pub fn add_column<'a, D: PoolDialect<Database: StateDb>>(
    pool: &'a Pool<D>,
    table: &'a str,
    create: bool,
    column: Addition,
) -> BoxFuture<'a, Result<Option<String>, DbError>> {
    Box::pin(async move {
        let sql = |template| render(template, &[("table", table)]);
        let mut conn = D::Database::connection(pool).await?;
        let has = number(&mut conn, statement(&sql(column.has), &[])).await?;
        if has != Some(0) {
            return Ok(None);
        }
        if !create {
            return Ok(Some(sql(column.add).as_str().to_owned()));
        }
        let added = D::Database::run(&mut conn, statement(&sql(column.add), &[])).await;
        match added {
            Err(e) if !lost_race::<D::Database>(&e) => Err(e),
            _ => Ok(None),
        }
    })
}

/// The error for a hand-made lock table without a column this release needs:
/// `column` names it and says what it holds, `add` adds it.
pub fn no_column(
    table: &impl std::fmt::Display,
    endpoint: &str,
    column: &str,
    add: &str,
) -> String {
    format!(
        "table `{table}` at {endpoint} has no {column}, which this release needs; add it with \
         {add}, or enable create_table to have it added"
    )
}
