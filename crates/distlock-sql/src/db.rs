//! The databases the fence runs on, MySQL (MariaDB) and PostgreSQL: each names
//! its SQL ([`Dialect`]) and runs the statements whose binds or replies differ
//! between the two; everything else ([`crate::SqlFence`], [`crate::SqlStore`])
//! is written once over [`SqlDatabase`].

use crate::dialect::{Dialect, MYSQL, POSTGRES};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, Database, MySql, Postgres, Row, Transaction};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an admit statement answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The token was recorded (or the row inserted with it).
    Yes,
    /// A higher token is stored: this one was refused, nothing changed.
    Stale(u64),
    /// The reply made no sense for this token.
    Odd(u64),
}

/// A database the fence runs on: [`MySql`] (MySQL 8, MariaDB 10.6+, InnoDB) or
/// [`Postgres`] (PostgreSQL 14+). Sealed: the SQL of each is this crate's.
pub trait SqlDatabase: Database + Steps {
    /// The backend name in errors (`mysql`, `postgres`).
    const BACKEND: &'static str;
}

impl SqlDatabase for MySql {
    const BACKEND: &'static str = "mysql";
}

impl SqlDatabase for Postgres {
    const BACKEND: &'static str = "postgres";
}

pub(crate) use sealed::Steps;

/// The steps whose SQL, binds or replies differ per database; private, so no
/// other crate can add a database.
mod sealed {
    use super::*;

    pub trait Steps: Database {
        /// Its statements.
        fn dialect() -> &'static Dialect;
        /// The server named by `options`, without credentials.
        fn endpoint(options: &<Self::Connection as sqlx::Connection>::Options) -> String;
        /// Runs one statement, returning the rows it changed.
        fn execute<'c>(
            conn: &'c mut Self::Connection,
            sql: Arc<str>,
            binds: Binds<'c>,
        ) -> BoxFuture<'c, Result<u64, sqlx::Error>>;
        /// Whether `error` is a `CREATE TABLE IF NOT EXISTS` that lost a race to
        /// another creating the same table (PostgreSQL checks the name first,
        /// then fails creating the table's row type or on its catalog's unique
        /// index): the table is there.
        fn lost_creation_race(error: &sqlx::Error) -> bool;
        /// What this database alone refuses in a lock table name that passed
        /// the toolkit's identifier check.
        fn table_name_problem(name: &str, example: &str) -> Option<String>;
        /// Runs the admit statement for `token`.
        fn admit<'c>(
            conn: &'c mut Self::Connection,
            sql: Arc<str>,
            resource: &'c [u8],
            token: u64,
        ) -> BoxFuture<'c, Result<Admitted, sqlx::Error>>;
        /// Reads a stored token (`highest`).
        fn read_token<'c>(
            conn: &'c mut Self::Connection,
            sql: Arc<str>,
            resource: &'c [u8],
        ) -> BoxFuture<'c, Result<Option<u64>, sqlx::Error>>;
        /// Reads a stored value.
        fn read_bytes<'c>(
            conn: &'c mut Self::Connection,
            sql: Arc<str>,
            resource: &'c [u8],
        ) -> BoxFuture<'c, Result<Option<Vec<u8>>, sqlx::Error>>;
        /// Whether a committed token survives a server crash, and whether the
        /// server is read-only, each with the warning to give when it is not so.
        fn durability(
            conn: &mut Self::Connection,
        ) -> BoxFuture<'_, Result<Vec<String>, sqlx::Error>>;
    }
}

/// The values one statement binds, in order.
#[derive(Debug)]
pub enum Binds<'a> {
    /// None.
    Nothing,
    /// resource.
    Resource(&'a [u8]),
    /// resource, value.
    Value(&'a [u8], &'a [u8]),
    /// resource, value, expiry µs, expiry µs.
    ValueExpiring(&'a [u8], &'a [u8], Option<i64>),
}

macro_rules! bound {
    ($db:ty, $sql:expr, $binds:expr) => {{
        let query = sqlx::query::<$db>(AssertSqlSafe($sql));
        match $binds {
            Binds::Nothing => query,
            Binds::Resource(resource) => query.bind(resource),
            Binds::Value(resource, value) => query.bind(resource).bind(value),
            Binds::ValueExpiring(resource, value, micros) => {
                query.bind(resource).bind(value).bind(micros).bind(micros)
            }
        }
    }};
}

macro_rules! shared_steps {
    ($db:ty) => {
        fn execute<'c>(
            conn: &'c mut <$db as Database>::Connection,
            sql: Arc<str>,
            binds: Binds<'c>,
        ) -> BoxFuture<'c, Result<u64, sqlx::Error>> {
            Box::pin(async move {
                let query = bound!($db, sql, binds);
                Ok(query.execute(conn).await?.rows_affected())
            })
        }

        fn read_bytes<'c>(
            conn: &'c mut <$db as Database>::Connection,
            sql: Arc<str>,
            resource: &'c [u8],
        ) -> BoxFuture<'c, Result<Option<Vec<u8>>, sqlx::Error>> {
            Box::pin(async move {
                sqlx::query_scalar::<$db, Vec<u8>>(AssertSqlSafe(sql))
                    .bind(resource)
                    .fetch_optional(conn)
                    .await
            })
        }
    };
}

impl sealed::Steps for MySql {
    fn lost_creation_race(_: &sqlx::Error) -> bool {
        false
    }

    fn table_name_problem(_: &str, _: &str) -> Option<String> {
        None
    }

    fn dialect() -> &'static Dialect {
        &MYSQL
    }

    fn endpoint(options: &MySqlConnectOptions) -> String {
        if let Some(socket) = options.get_socket() {
            return format!("mysql://{}", socket.display());
        }
        let (host, port) = (options.get_host(), options.get_port());
        let database = options.get_database().unwrap_or("");
        match host.contains(':') {
            true => format!("mysql://[{host}]:{port}/{database}"),
            false => format!("mysql://{host}:{port}/{database}"),
        }
    }

    shared_steps!(MySql);

    /// The statement reports a refusal through the insert id: the stored
    /// highest token (never 0, as it exceeds the token). No insert id means the
    /// row was inserted or the token recorded.
    fn admit<'c>(
        conn: &'c mut MySqlConnection,
        sql: Arc<str>,
        resource: &'c [u8],
        token: u64,
    ) -> BoxFuture<'c, Result<Admitted, sqlx::Error>> {
        Box::pin(async move {
            let result = sqlx::query(AssertSqlSafe(sql))
                .bind(resource)
                .bind(token)
                .bind(token)
                .bind(token)
                .execute(conn)
                .await?;
            Ok(match result.last_insert_id() {
                0 => Admitted::Yes,
                highest if highest > token => Admitted::Stale(highest),
                other => Admitted::Odd(other),
            })
        })
    }

    fn read_token<'c>(
        conn: &'c mut MySqlConnection,
        sql: Arc<str>,
        resource: &'c [u8],
    ) -> BoxFuture<'c, Result<Option<u64>, sqlx::Error>> {
        Box::pin(async move {
            sqlx::query_scalar::<MySql, u64>(AssertSqlSafe(sql))
                .bind(resource)
                .fetch_optional(conn)
                .await
        })
    }

    fn durability(conn: &mut MySqlConnection) -> BoxFuture<'_, Result<Vec<String>, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query(MYSQL.durability).fetch_one(conn).await?;
            let (flush, read_only): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            let mut warnings = Vec::new();
            if flush != 1 {
                warnings.push(format!(
                    "innodb_flush_log_at_trx_commit is {flush}: a server crash can lose the last \
                     second of commits, fence records included, and then admit a stale holder's \
                     write; set it to 1 where fenced data lives"
                ));
            }
            if read_only != 0 {
                warnings.push(
                    "the server is read-only (a replica?): fenced writes must go to the primary"
                        .to_owned(),
                );
            }
            Ok(warnings)
        })
    }
}

impl sealed::Steps for Postgres {
    fn lost_creation_race(error: &sqlx::Error) -> bool {
        let sqlx::Error::Database(e) = error else {
            return false;
        };
        // unique_violation (on pg_type), duplicate_table, duplicate_object
        // (`type "…" already exists`: the table's row type).
        matches!(e.code().as_deref(), Some("23505" | "42P07" | "42710"))
    }

    fn dialect() -> &'static Dialect {
        &POSTGRES
    }

    /// PostgreSQL identifiers are at most 63 bytes (longer ones are silently
    /// truncated), and a `$` would need quoting rules of its own.
    fn table_name_problem(name: &str, example: &str) -> Option<String> {
        (name.len() > 63 || name.contains('$')).then(|| {
            format!(
                "table name `{name}` must be at most 63 ASCII letters, digits or `_` on PostgreSQL; for example {example}"
            )
        })
    }

    fn endpoint(options: &PgConnectOptions) -> String {
        let database = options.get_database().unwrap_or("");
        if let Some(socket) = options.get_socket() {
            return format!("postgres://{}/{database}", socket.display());
        }
        let (host, port) = (options.get_host(), options.get_port());
        match host.contains(':') {
            true => format!("postgres://[{host}]:{port}/{database}"),
            false => format!("postgres://{host}:{port}/{database}"),
        }
    }

    shared_steps!(Postgres);

    /// The statement returns the stored highest after the update, which keeps
    /// the greater of the two: the token itself when admitted.
    fn admit<'c>(
        conn: &'c mut PgConnection,
        sql: Arc<str>,
        resource: &'c [u8],
        token: u64,
    ) -> BoxFuture<'c, Result<Admitted, sqlx::Error>> {
        Box::pin(async move {
            let Ok(signed) = i64::try_from(token) else {
                return Ok(Admitted::Odd(token));
            };
            let highest: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(resource)
                .bind(signed)
                .fetch_one(conn)
                .await?;
            Ok(match u64::try_from(highest) {
                Ok(highest) if highest == token => Admitted::Yes,
                Ok(highest) if highest > token => Admitted::Stale(highest),
                _ => Admitted::Odd(highest.unsigned_abs()),
            })
        })
    }

    fn read_token<'c>(
        conn: &'c mut PgConnection,
        sql: Arc<str>,
        resource: &'c [u8],
    ) -> BoxFuture<'c, Result<Option<u64>, sqlx::Error>> {
        Box::pin(async move {
            let highest: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql))
                .bind(resource)
                .fetch_optional(conn)
                .await?;
            Ok(highest.and_then(|h| u64::try_from(h).ok()))
        })
    }

    fn durability(conn: &mut PgConnection) -> BoxFuture<'_, Result<Vec<String>, sqlx::Error>> {
        Box::pin(async move {
            let row = sqlx::query(POSTGRES.durability).fetch_one(conn).await?;
            let (durable, standby): (bool, bool) = (row.try_get(0)?, row.try_get(1)?);
            let mut warnings = Vec::new();
            if !durable {
                warnings.push(
                    "fsync or synchronous_commit is off: a server crash can lose the last commits, \
                     fence records included, and then admit a stale holder's write; turn both on \
                     where fenced data lives"
                        .to_owned(),
                );
            }
            if standby {
                warnings.push(
                    "the server is a standby: fenced writes must go to the primary".to_owned(),
                );
            }
            Ok(warnings)
        })
    }
}

/// A connection [`crate::SqlFence`] can run on: a [`MySqlConnection`] or
/// [`PgConnection`], a [`Transaction`] of either (pass `&mut tx`), or a pooled
/// one.
pub trait FenceConnection: Send {
    /// The database it talks to.
    type Database: SqlDatabase;
    /// The connection underneath.
    fn connection(&mut self) -> &mut <Self::Database as Database>::Connection;
}

impl FenceConnection for MySqlConnection {
    type Database = MySql;
    fn connection(&mut self) -> &mut MySqlConnection {
        self
    }
}

impl FenceConnection for PgConnection {
    type Database = Postgres;
    fn connection(&mut self) -> &mut PgConnection {
        self
    }
}

impl<DB: SqlDatabase> FenceConnection for Transaction<'_, DB> {
    type Database = DB;
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

impl<DB: SqlDatabase> FenceConnection for PoolConnection<DB> {
    type Database = DB;
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}
