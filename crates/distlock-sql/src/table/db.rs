//! The values statements bind, and the steps every table runs alike on both
//! databases: binding a value (PostgreSQL has no unsigned integers: `BIGINT`
//! there), taking a connection and running one statement.

use crate::db::{BoxFuture, SqlDatabase};
use crate::db_error::DbError;
use crate::pool::{Conn, Pool, PoolDialect, Statement};
use sqlx::{MySql, Postgres, SqlSafeStr};
use std::sync::Arc;
use std::time::Duration;

/// One bound value. Text and bytes are shared: an attempt's values are
/// bound to several statements (and kept for its undo), and a clone is a
/// count, not a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Bytes (MySQL's binary names).
    Bytes(Arc<[u8]>),
    /// Text (owners, PostgreSQL's namespace and names).
    Text(Arc<str>),
    /// An unsigned number (slot, token, ttl µs).
    Int(u64),
    /// A number or NULL (a semaphore's limit).
    MaybeInt(Option<u64>),
    /// A flag.
    Flag(bool),
}

impl Value {
    /// About the bytes its encoding takes bound (without a length prefix).
    pub(crate) fn encoded_len(&self) -> usize {
        match self {
            Value::Bytes(bytes) => bytes.len(),
            Value::Text(text) => text.len(),
            Value::Int(_) | Value::MaybeInt(_) => 8,
            Value::Flag(_) => 1,
        }
    }
}

/// A database the tables run on. Its methods run one statement on a
/// connection of an adapter's pool.
pub trait TableDb: SqlDatabase + sqlx::Database<Arguments: sqlx::IntoArguments<Self>> {
    /// Opens a transaction of several statements (and bounds its lock waits).
    const BEGIN: &'static str;

    /// Runs `sql` as text (a transaction's start or end), waiting at most `limit`.
    fn text<'c, D: PoolDialect<Database = Self>>(
        conn: &'c mut Conn<D>,
        sql: &'static str,
        limit: Duration,
    ) -> BoxFuture<'c, Result<(), DbError>>;

    /// `query` with `value` bound next.
    fn bind(query: Statement<Self>, value: &Value) -> Statement<Self>;

    /// A connection of `pool`.
    fn connection<D: PoolDialect<Database = Self>>(
        pool: &Pool<D>,
    ) -> BoxFuture<'_, Result<Conn<D>, DbError>>;

    /// Runs `query`, returning the rows it changed (or returned).
    fn run<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<u64, DbError>>;

    /// Runs `query`, returning its rows.
    fn fetch_all<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<Vec<Self::Row>, DbError>>;
}

/// The steps both databases run alike (only the types differ).
macro_rules! common_steps {
    ($db:ty) => {
        fn text<'c, D: PoolDialect<Database = $db>>(
            conn: &'c mut Conn<D>,
            sql: &'static str,
            limit: Duration,
        ) -> BoxFuture<'c, Result<(), DbError>> {
            Box::pin(async move { conn.execute_text(sql.into_sql_str(), limit).await.map(drop) })
        }

        fn connection<D: PoolDialect<Database = $db>>(
            pool: &Pool<D>,
        ) -> BoxFuture<'_, Result<Conn<D>, DbError>> {
            Box::pin(pool.get())
        }

        fn run<D: PoolDialect<Database = $db>>(
            conn: &mut Conn<D>,
            query: Statement<$db>,
        ) -> BoxFuture<'_, Result<u64, DbError>> {
            Box::pin(async move { Ok(conn.execute(query).await?.rows_affected()) })
        }

        fn fetch_all<D: PoolDialect<Database = $db>>(
            conn: &mut Conn<D>,
            query: Statement<$db>,
        ) -> BoxFuture<'_, Result<Vec<<$db as sqlx::Database>::Row>, DbError>> {
            Box::pin(conn.fetch_all(query))
        }
    };
}

impl TableDb for MySql {
    const BEGIN: &'static str = "BEGIN";

    fn bind(query: Statement<MySql>, value: &Value) -> Statement<MySql> {
        match value {
            Value::Bytes(bytes) => query.bind(&**bytes),
            Value::Text(text) => query.bind(&**text),
            Value::Int(n) => query.bind(*n),
            Value::MaybeInt(n) => query.bind(*n),
            Value::Flag(flag) => query.bind(*flag),
        }
    }

    common_steps!(MySql);
}

impl TableDb for Postgres {
    // Lock waits end like InnoDB's on the MySQL pool: refused after 1 s, and
    // the attempt is tried again.
    const BEGIN: &'static str = "BEGIN; SET LOCAL lock_timeout = '1s'";

    fn bind(query: Statement<Postgres>, value: &Value) -> Statement<Postgres> {
        let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match value {
            Value::Bytes(bytes) => query.bind(&**bytes),
            Value::Text(text) => query.bind(&**text),
            Value::Int(n) => query.bind(signed(*n)),
            Value::MaybeInt(n) => query.bind(n.map(signed)),
            Value::Flag(flag) => query.bind(*flag),
        }
    }

    common_steps!(Postgres);
}
