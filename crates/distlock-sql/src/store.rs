//! [`SqlStore`]: a fenced value table, the [`Fence`] trait on MySQL or
//! PostgreSQL for data that has no table of its own, and one fenced statement
//! for data that does.

use crate::db::{Binds, SqlDatabase};
use crate::dialect::render;
use crate::error::{is_contention, map_error_at};
use crate::fence::SqlFence;
use crate::ident::Ident;
use async_trait::async_trait;
use distlock_core::fence::{
    CheckedStatement, CheckedWrite, add_outcome, invalid_write, validate_resource,
};
use distlock_core::toolkit::Timeouts;
use distlock_core::{Fence, FencedWrite, FencingToken, LockError, WriteOutcome};
use sqlx::pool::{PoolConnection, PoolOptions};
use sqlx::{ConnectOptions, Connection, MySql, Pool};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Whole transactions run again after a deadlock or lock wait timeout, at most
/// this many times in all.
const ATTEMPTS: usize = 5;

/// A fenced key-value table on MySQL, MariaDB ([`MySql`], the default) or
/// PostgreSQL ([`sqlx::Postgres`]): every [`Fence::write`] is one
/// transaction that admits the token with [`SqlFence::admit`] and then writes
/// the value, so it commits only if the token was admitted.
/// [`SqlStore::execute`] runs one statement of your own the same way.
///
/// Values live in `distlock_fenced_values` (resource `VARBINARY(512)` primary
/// key, value `MEDIUMBLOB`, `expires_at TIMESTAMP(6)` judged by the database
/// clock; on PostgreSQL `BYTEA`, `BYTEA`, `TIMESTAMPTZ`), tokens in [`SqlFence`]'s `distlock_fences`; both are created if
/// missing. Hash writes are refused: use Redis, or your own table with
/// [`SqlFence`].
///
/// ```no_run
/// use distlock_core::{Fence, FencedWrite, FencingToken};
/// use distlock_core::toolkit::Timeouts;
/// use std::time::Duration;
/// # async fn run() -> Result<(), distlock_core::LockError> {
/// let options = "mysql://app:secret@127.0.0.1/app".parse().map_err(|_| {
///     distlock_core::LockError::config("mysql", "bad URL")
/// })?;
/// let timeouts = Timeouts::new(Duration::from_secs(5), Duration::from_secs(5));
/// let store = distlock_sql::SqlStore::connect(options, timeouts).await?;
/// store.write("stock/sku-42", FencingToken::new(7), FencedWrite::add_with_floor(-1, 0)).await?;
/// store.execute("stock/sku-42", FencingToken::new(7), "UPDATE orders SET state = 'paid' WHERE id = 9").await?;
/// # Ok(()) }
/// ```
pub struct SqlStore<DB: SqlDatabase = MySql> {
    pool: Pool<DB>,
    fence: SqlFence,
    timeouts: Timeouts,
    endpoint: String,
    sql: Statements,
}

impl<DB: SqlDatabase> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("endpoint", &self.endpoint)
            .field("fences", &self.fence.table())
            .field("values", &VALUES_TABLE)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

/// What one fenced transaction does after admitting the token.
enum Work<'a> {
    Write(&'a FencedWrite),
    Statement(&'a str),
}

/// What it did.
enum Done {
    Write(WriteOutcome),
    Rows(u64),
}

/// The store's statements, rendered for its value table.
struct Statements {
    set: Arc<str>,
    keep_expiry: Arc<str>,
    delete: Arc<str>,
    read: Arc<str>,
}

/// The value table.
const VALUES_TABLE: &str = "distlock_fenced_values";

impl SqlStore<MySql> {
    /// [`SqlStore::connect_to`] a MySQL or MariaDB server.
    pub async fn connect(
        options: sqlx::mysql::MySqlConnectOptions,
        timeouts: Timeouts,
    ) -> Result<Self, LockError> {
        Self::connect_to(options, timeouts).await
    }
}

impl<DB: SqlDatabase> SqlStore<DB> {
    /// The value table.
    pub const VALUES_TABLE: &'static str = VALUES_TABLE;

    /// Connects a pool to the server in `options` (`MySqlConnectOptions` for
    /// `SqlStore<MySql>`, `PgConnectOptions` for `SqlStore<Postgres>`), waiting
    /// at most `timeouts.connect`, and creates both tables if missing. Every
    /// later call waits at most `timeouts.reply` for the server.
    ///
    /// ```no_run
    /// # async fn run(options: sqlx::postgres::PgConnectOptions) -> Result<(), distlock_core::LockError> {
    /// use distlock_core::toolkit::Timeouts;
    /// use std::time::Duration;
    /// let timeouts = Timeouts::new(Duration::from_secs(5), Duration::from_secs(5));
    /// let store = distlock_sql::SqlStore::<sqlx::Postgres>::connect_to(options, timeouts).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_to(
        options: <DB::Connection as Connection>::Options,
        timeouts: Timeouts,
    ) -> Result<Self, LockError> {
        timeouts.validate(DB::BACKEND)?;
        let endpoint = DB::endpoint(&options);
        let pool = PoolOptions::<DB>::new()
            .max_connections(10)
            .acquire_timeout(timeouts.connect)
            .connect_with(options.disable_statement_logging());
        let pool = within(DB::BACKEND, timeouts.connect, &endpoint, async {
            pool.await
                .map_err(|e| map_error_at(e, &endpoint, DB::BACKEND))
        })
        .await?;
        let values = Ident::known(VALUES_TABLE);
        let statement = |template| render(template, &[("values", &values)]);
        let dialect = DB::dialect();
        let store = SqlStore {
            fence: SqlFence::new(),
            sql: Statements {
                set: statement(dialect.value_set),
                keep_expiry: statement(dialect.value_keep_expiry),
                delete: statement(dialect.value_delete),
                read: statement(dialect.value_read),
            },
            pool,
            timeouts,
            endpoint,
        };
        let create_values = statement(dialect.create_values);
        within(DB::BACKEND, store.budget(), &store.endpoint, async {
            let mut conn = store.conn().await?;
            store.fence.create_table(&mut conn).await?;
            match DB::execute(&mut conn, create_values, Binds::Nothing).await {
                Err(e) if !DB::lost_creation_race(&e) => Err(store.error(e)),
                _ => Ok(()),
            }
        })
        .await?;
        Ok(store)
    }

    /// Runs `work` after admitting `token` in one transaction, committing only
    /// if both succeed; the whole transaction runs again after a deadlock or
    /// lock wait timeout.
    async fn transaction(
        &self,
        resource: &str,
        token: FencingToken,
        work: Work<'_>,
    ) -> Result<Done, LockError> {
        let mut attempt = 1;
        loop {
            let once = self.transaction_once(resource, token, &work);
            match within(DB::BACKEND, self.budget(), &self.endpoint, once).await {
                Err(e) if is_contention(&e) && attempt < ATTEMPTS => attempt += 1,
                other => return other,
            }
        }
    }

    async fn transaction_once(
        &self,
        resource: &str,
        token: FencingToken,
        work: &Work<'_>,
    ) -> Result<Done, LockError> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await.map_err(|e| self.error(e))?;
        self.fence.admit(&mut tx, resource, token).await?;
        let done = match work {
            Work::Write(write) => Done::Write(self.apply(&mut tx, resource, write).await?),
            Work::Statement(statement) => {
                let statement: Arc<str> = Arc::from(*statement);
                let rows = DB::execute(&mut tx, statement, Binds::Nothing)
                    .await
                    .map_err(|e| self.error(e))?;
                Done::Rows(rows)
            }
        };
        tx.commit().await.map_err(|e| self.error(e))?;
        Ok(done)
    }

    /// How long one call may take: a connection, then the reply.
    fn budget(&self) -> Duration {
        self.timeouts.connect + self.timeouts.reply
    }

    async fn conn(&self) -> Result<PoolConnection<DB>, LockError> {
        self.pool.acquire().await.map_err(|e| self.error(e))
    }

    fn error(&self, error: sqlx::Error) -> LockError {
        map_error_at(error, &self.endpoint, DB::BACKEND)
    }

    async fn read_value(
        &self,
        conn: &mut DB::Connection,
        resource: &str,
    ) -> Result<Option<String>, LockError> {
        let value = DB::read_bytes(conn, self.sql.read.clone(), resource.as_bytes())
            .await
            .map_err(|e| self.error(e))?;
        value
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|_| {
                    LockError::backend(
                        DB::BACKEND,
                        format!("the value of `{resource}` is not UTF-8"),
                    )
                })
            })
            .transpose()
    }

    /// Applies `write` inside the admitting transaction. The fence row's lock
    /// serialises every writer of `resource`, so the plain read below (whose
    /// snapshot starts after that lock was granted) sees the latest commit, and
    /// takes no gap lock that two first writers could deadlock on.
    async fn apply(
        &self,
        tx: &mut DB::Connection,
        resource: &str,
        write: &FencedWrite,
    ) -> Result<WriteOutcome, LockError> {
        let key = resource.as_bytes();
        let (sql, binds) = match write {
            FencedWrite::Set { value, expire } => {
                let micros = expire.map(|e| i64::try_from(e.as_micros()).unwrap_or(i64::MAX));
                let binds = Binds::ValueExpiring(key, value.as_bytes(), micros);
                (&self.sql.set, binds)
            }
            FencedWrite::Delete => (&self.sql.delete, Binds::Resource(key)),
            FencedWrite::Add { delta, floor } => {
                let current = match self.read_value(tx, resource).await? {
                    None => 0,
                    Some(text) => text.parse::<i64>().map_err(|_| {
                        invalid_write(format!(
                            "`{resource}` holds {text:?}, not an integer; set or delete it first"
                        ))
                    })?,
                };
                let outcome = add_outcome(resource, current, *delta, *floor)?;
                if let WriteOutcome::Counter(next) = outcome {
                    let text = next.to_string();
                    let binds = Binds::Value(key, text.as_bytes());
                    DB::execute(tx, self.sql.keep_expiry.clone(), binds)
                        .await
                        .map_err(|e| self.error(e))?;
                }
                return Ok(outcome);
            }
            FencedWrite::HashSet { .. } => {
                return Err(invalid_write(
                    "a SQL store holds plain values, not hashes; keep hashes in Redis, or fence \
                     your own table with SqlFence"
                        .into(),
                ));
            }
            _ => return Err(invalid_write("this store does not know that write".into())),
        };
        DB::execute(tx, sql.clone(), binds)
            .await
            .map_err(|e| self.error(e))?;
        Ok(WriteOutcome::Written)
    }
}

#[async_trait]
impl<DB: SqlDatabase> Fence for SqlStore<DB> {
    async fn apply(&self, checked: CheckedWrite<'_>) -> Result<WriteOutcome, LockError> {
        match self
            .transaction(checked.resource, checked.token, Work::Write(&checked.write))
            .await?
        {
            Done::Write(outcome) => Ok(outcome),
            Done::Rows(_) => Err(LockError::backend(
                DB::BACKEND,
                "a write ran as a statement",
            )),
        }
    }

    /// Runs `statement` in the transaction that admits `token` for `resource`:
    /// it commits only if the token is admitted, and a stale token
    /// ([`LockError::StaleToken`]) rolls it back. Returns the rows it matched.
    /// DDL commits on its own in MySQL, whatever the transaction: fence only DML.
    async fn run(&self, checked: CheckedStatement<'_>) -> Result<u64, LockError> {
        let work = Work::Statement(checked.statement);
        match self
            .transaction(checked.resource, checked.token, work)
            .await?
        {
            Done::Rows(rows) => Ok(rows),
            Done::Write(_) => Err(LockError::backend(
                DB::BACKEND,
                "a statement ran as a write",
            )),
        }
    }

    async fn read(&self, resource: &str) -> Result<Option<String>, LockError> {
        validate_resource(resource)?;
        within(DB::BACKEND, self.budget(), &self.endpoint, async {
            self.read_value(&mut *self.conn().await?, resource).await
        })
        .await
    }

    async fn highest(&self, resource: &str) -> Result<Option<FencingToken>, LockError> {
        validate_resource(resource)?;
        within(DB::BACKEND, self.budget(), &self.endpoint, async {
            self.fence.highest(&mut self.conn().await?, resource).await
        })
        .await
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let warnings = within(DB::BACKEND, self.budget(), &self.endpoint, async {
            DB::durability(&mut *self.conn().await?)
                .await
                .map_err(|e| self.error(e))
        })
        .await?;
        Ok(warnings
            .into_iter()
            .map(|warning| format!("{}: {warning}", self.endpoint))
            .collect())
    }
}

/// `work`, or [`LockError::Unavailable`] if the server has not answered
/// within `budget`.
async fn within<T>(
    backend: &'static str,
    budget: Duration,
    endpoint: &str,
    work: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(budget, work)
        .await
        .unwrap_or_else(|_| {
            Err(LockError::Unavailable {
                backend,
                endpoint: endpoint.to_owned(),
                source: format!("no answer within {budget:?}").into(),
            })
        })
}
