//! The adapter: connect (schema, strategy check) and the [`Backend`] impl, which
//! hands each call to the chosen strategy's module.

use crate::error::{BACKEND, DbError};
use crate::pool::Pool;
use crate::sql::{self, Statements};
use crate::{MySqlConfig, MySqlLock, Strategy, TableName, for_update, unique_insert, version_cas};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, Ownership};
use distlock_core::{BackendLock, Capabilities, LockError};
use sqlx::Row;
use std::sync::Arc;
use std::time::Duration;

/// The MySQL adapter behind [`MySqlLock`]. Reach it with
/// [`BackendLock::backend`] for its strategy and table.
#[derive(Debug)]
pub struct MySqlBackend {
    inner: Arc<Inner>,
}

/// What every strategy module works with.
#[derive(Debug)]
pub(crate) struct Inner {
    pub strategy: Strategy,
    pub table: TableName,
    pub sql: Statements,
    /// Autocommit connections for single statements.
    pub pool: Pool,
    /// `for_update` only: connections that hold a lock's transaction.
    pub holders: Option<Pool>,
    pub endpoint: String,
}

impl Inner {
    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&self.endpoint)
    }

    /// The ttl in whole microseconds, as `INTERVAL ? MICROSECOND` takes it.
    pub fn micros(ttl: Duration) -> u64 {
        u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)
    }
}

/// What a held lock keeps: its row, owner value and token, and for `for_update`
/// the connection whose transaction holds the row lock.
#[derive(Debug)]
pub struct MySqlHandle {
    pub(crate) row: Vec<u8>,
    pub(crate) owner: String,
    pub(crate) fence: u64,
    pub(crate) session: Option<for_update::Session>,
}

impl MySqlBackend {
    /// The strategy this client uses.
    pub fn strategy(&self) -> Strategy {
        self.inner.strategy
    }

    /// The lock table.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }
}

/// The comment that marks a table as owned by `strategy`.
fn table_comment(strategy: Strategy) -> String {
    format!("distlock:{}", strategy.as_str())
}

pub(crate) async fn connect(config: MySqlConfig) -> Result<MySqlLock, LockError> {
    let table = config.validate()?;
    let endpoint = config.endpoint();
    let err = |e: DbError| e.into_lock_error(&endpoint);
    let pool = Pool::new(
        config.options.clone(),
        config.pool_size,
        &[],
        config.connect_timeout,
        config.request_timeout,
    );
    let holders = (config.strategy == Strategy::ForUpdate).then(|| {
        Pool::new(
            config.options.clone(),
            config.held_connections,
            &[sql::HOLDER_ISOLATION, sql::HOLDER_NO_AUTOCOMMIT],
            config.connect_timeout,
            config.request_timeout,
        )
    });
    let comment = table_comment(config.strategy);
    let mut conn = pool.get().await.map_err(err)?;
    if config.create_table {
        // IF NOT EXISTS under the server's metadata lock: clients starting at once
        // all succeed, and exactly one creates the table.
        conn.execute(sqlx::query(Statements::create_table(&table, &comment)))
            .await
            .map_err(err)?;
    }
    let found = conn
        .fetch_optional_within(
            sqlx::query(sql::TABLE_COMMENT).bind(table.as_str().to_owned()),
            config.request_timeout,
        )
        .await
        .map_err(err)?;
    let found: Option<String> = found
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(|e| err(DbError::Sql(e)))?;
    match found {
        Some(found) if found == comment => {}
        Some(found) => {
            return Err(LockError::config(
                BACKEND,
                format!(
                    "table `{table}` at {endpoint} is marked `{found}`, not `{comment}`: strategies cannot share a \
                     table; use another table for {}, or mark a hand-made table with \
                     ALTER TABLE `{table}` COMMENT='{comment}'",
                    config.strategy.as_str()
                ),
            ));
        }
        None => {
            return Err(LockError::config(
                BACKEND,
                format!(
                    "table `{table}` does not exist at {endpoint}; enable create_table or create it with the SQL in \
                     docs/backends/mysql.md"
                ),
            ));
        }
    }
    drop(conn);
    let inner = Inner {
        strategy: config.strategy,
        sql: Statements::new(&table),
        table,
        pool,
        holders,
        endpoint,
    };
    Ok(BackendLock::new(MySqlBackend {
        inner: Arc::new(inner),
    }))
}

#[async_trait]
impl Backend for MySqlBackend {
    type Handle = MySqlHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.strategy.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<MySqlHandle>, LockError> {
        match self.inner.strategy {
            Strategy::VersionCas => version_cas::acquire(&self.inner, &req).await,
            Strategy::UniqueInsert => unique_insert::acquire(&self.inner, &req).await,
            Strategy::ForUpdate => for_update::acquire(&self.inner, &req).await,
        }
    }

    async fn renew(&self, handle: &MySqlHandle, ttl: Duration) -> Result<Ownership, LockError> {
        match self.inner.strategy {
            Strategy::VersionCas => version_cas::renew(&self.inner, handle, ttl).await,
            Strategy::UniqueInsert => unique_insert::renew(&self.inner, handle, ttl).await,
            Strategy::ForUpdate => for_update::renew(&self.inner, handle).await,
        }
    }

    async fn release(&self, handle: &MySqlHandle) -> Result<Ownership, LockError> {
        match self.inner.strategy {
            Strategy::VersionCas => version_cas::release(&self.inner, handle).await,
            Strategy::UniqueInsert => unique_insert::release(&self.inner, handle).await,
            Strategy::ForUpdate => for_update::release(&self.inner, handle).await,
        }
    }
}
