//! What the three strategies' [`Backend`](distlock_core::adapter::Backend)
//! impls share: the lock table at one server (opened and checked once at
//! connect), the statements they run alike, and what distlock-sql's code
//! written once (`version_cas`, the polling wait, the semaphore and read-write
//! lock) gets from it: its binary row names ([`row_name`]), `KILL` for a
//! cut-off attempt's session, and doorbells instead of wake-ups (MySQL tells
//! nobody of a release; a lock's holder keeps a named server lock its waiters
//! queue on, see `bell`; a semaphore's or read-write lock's waiters poll).
//!
//! Invariant of every strategy: a table belongs to one strategy (its comment
//! says which), every expiry is compared with `NOW(6)` on the server, and a
//! name's fence only ever rises.
//!
//! Row-lock contention is never an error for the caller: a statement that
//! InnoDB refused (deadlock victim 1213, lock wait timeout 1205) was rolled back
//! whole, so it is retried with [`Backoff`] within the caller's wait
//! (`retry_until`); an acquisition that runs out of wait that way ends with
//! `Timeout` (`Busy` for `Wait::No`), like any other.

use crate::error::{BACKEND, DbError, code};
use crate::keys::{TableName, exact_range, prefix_range, row_name};
use crate::pool::{Pool, Statement, Thread};
use crate::protocol::{
    COUNTER_IDLE, KILL_CONNECTION, SESSION_LISTED, Statements, Strategy, TABLE_COMMENT,
};
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Backoff;
use distlock_core::{Capabilities, LockError, LockKey};
use distlock_sql::cas::CasStatements;
use distlock_sql::pool::BoxFuture;
pub(crate) use distlock_sql::settle::{Settle, retry_until};
use distlock_sql::state::{self, Collector, StateDb};
use distlock_sql::table::bell::Doorbell;
use distlock_sql::table::{LockTable, Names, Primitive, Value, run_settled};
use sqlx::{MySql, Row};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The first pause while polling for a killed session to be gone.
const CONTENDED_FIRST: Duration = distlock_sql::settle::CONTENDED_FIRST;
/// How often an undo looks whether a killed session is gone, at most.
const SESSION_GONE_POLL: Duration = Duration::from_millis(50);

/// The lock table of one client: its strategy, statements and connections.
#[derive(Debug)]
pub(crate) struct Table {
    pub strategy: Strategy,
    pub name: TableName,
    pub sql: Statements,
    /// `version_cas`'s statements (distlock-sql's).
    pub cas: CasStatements,
    /// The collection of idle rows of the lock table: `unique_insert`'s
    /// lock and counter rows, and the floor `for_update`'s collection
    /// (`counter`) raises.
    pub counters: Collector,
    /// How long a name's rows outlive its last lease.
    pub state_ttl: Duration,
    /// Autocommit connections for single statements.
    pub pool: Pool,
    /// Connections that hold a `for_update` lock's transaction, or the other
    /// strategies' doorbells (autocommit on), one per held or waiting lock.
    pub holders: Pool,
    /// The server, without credentials, for messages.
    pub endpoint: String,
}

impl Table {
    /// Creates the table if missing (when asked) and checks that it belongs to
    /// `strategy`, on a connection of `pool`.
    pub async fn open(
        strategy: Strategy,
        name: TableName,
        pool: Pool,
        holders: Pool,
        endpoint: String,
        create: bool,
        state_ttl: Duration,
    ) -> Result<Table, LockError> {
        let err = |e: DbError| e.into_lock_error(&crate::error::TEXTS, &endpoint);
        let mut conn = pool.get().await.map_err(err)?;
        if create {
            // IF NOT EXISTS under the server's metadata lock: clients starting at
            // once all succeed, and exactly one creates the table.
            conn.execute(sqlx::query(Statements::create_table(&name, strategy)))
                .await
                .map_err(err)?;
        }
        let found = conn
            .fetch_optional_within(
                sqlx::query(TABLE_COMMENT).bind(name.as_str()),
                pool.timeout(),
            )
            .await
            .map_err(err)?;
        let found: Option<String> = found
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(|e| err(DbError::Sql(e)))?;
        let comment = strategy.table_comment();
        match found {
            Some(found) if found == comment => {}
            Some(found) => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table `{name}` at {endpoint} is marked `{found}`, not `{comment}`: strategies cannot share a \
                         table; use another table for {}, or mark a hand-made table with \
                         ALTER TABLE `{name}` COMMENT='{comment}'",
                        strategy.as_str()
                    ),
                ));
            }
            None => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table `{name}` does not exist at {endpoint}; enable create_table or create it with the SQL in \
                         the distlock-mysql crate docs"
                    ),
                ));
            }
        }
        drop(conn);
        let holder = MySql::STATE.holder;
        let missing = state::add_column(&pool, name.as_str(), create, holder).await;
        if let Some(add) = missing.map_err(err)? {
            let no_column = state::no_column(&name, &endpoint, state::HOLDER_COLUMN, &add);
            return Err(LockError::config(BACKEND, no_column));
        }
        let index = MySql::STATE.index;
        state::prepare(&pool, name.as_str(), name.as_str(), vec![], create, index)
            .await
            .map_err(err)?;
        Ok(Table {
            strategy,
            sql: Statements::new(&name),
            cas: CasStatements::new::<MySql>(name.as_str(), state_ttl),
            counters: Collector::with_idle::<MySql>(
                name.as_str(),
                name.as_str(),
                state_ttl,
                COUNTER_IDLE,
            ),
            state_ttl,
            name,
            pool,
            holders,
            endpoint,
        })
    }

    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&crate::error::TEXTS, &self.endpoint)
    }

    /// Runs the autocommit statement `build()` makes, retried under row-lock
    /// contention for at most the reply timeout, and returns the rows it
    /// matched.
    pub async fn run_settled(&self, build: impl Fn() -> Statement) -> Result<u64, LockError> {
        run_settled(&self.pool, build)
            .await
            .map_err(|e| self.error(e))
    }
}

/// The undo of a cut-off attempt, written once in distlock-sql: `KILL`, then
/// until `PROCESSLIST` no longer lists the session, then the statement.
pub(crate) type Undo = distlock_sql::table::Undo<Table>;
pub(crate) use distlock_sql::table::undo;
/// Builds one statement, again for each retry.
pub(crate) type MakeStatement = distlock_sql::table::MakeStatement<MySql>;

impl LockTable for Table {
    type Dialect = Thread;
    /// MySQL tells nobody of a release.
    type Waiter = Arc<Notify>;

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn capabilities(&self) -> Capabilities {
        self.strategy.capabilities()
    }

    /// The table is the namespace.
    fn namespace(&self) -> Vec<Value> {
        Vec::new()
    }

    fn key(&self, key: &LockKey) -> Vec<Value> {
        vec![Value::Bytes(row_name(key).into())]
    }

    /// The byte range `[low, high)` of the names.
    fn names(&self, names: Names<'_>) -> Vec<Value> {
        let (low, high) = match names {
            Names::One(key) => exact_range(&row_name(key)),
            Names::Under(prefix) => prefix_range(prefix.as_bytes()),
        };
        vec![Value::Bytes(low.into()), Value::Bytes(high.into())]
    }

    fn end_session(&self, thread: Thread) -> BoxFuture<'_, Result<(), DbError>> {
        Box::pin(self.end_session(thread.id))
    }

    fn waiter(&self, _: &LockKey, _: Option<Primitive>) -> Option<Arc<Notify>> {
        None
    }

    /// The polling strategies' (see `bell`); `for_update` waits in InnoDB's queue.
    fn doorbell(&self) -> Option<&dyn Doorbell<Thread>> {
        (self.strategy != Strategy::ForUpdate).then_some(self as &dyn Doorbell<Thread>)
    }
}

impl Table {
    /// Ends session `id` and returns once the server no longer lists it.
    pub(crate) async fn end_session(&self, id: u64) -> Result<(), DbError> {
        let mut conn = self.pool.get().await?;
        match conn.execute(sqlx::query(KILL_CONNECTION).bind(id)).await {
            Err(e) if e.number() != Some(code::UNKNOWN_THREAD) => return Err(e),
            _ => {}
        }
        let until = WaitUntil::Deadline(Instant::now() + self.pool.timeout());
        let mut backoff = Backoff::new(CONTENDED_FIRST, SESSION_GONE_POLL);
        loop {
            let listed = conn.fetch_one(sqlx::query(SESSION_LISTED).bind(id)).await?;
            if listed.try_get::<i64, _>(0).map_err(DbError::Sql)? == 0 {
                return Ok(());
            }
            if !backoff.pause(SESSION_GONE_POLL, until).await {
                return Err(DbError::Protocol(format!(
                    "session {id} still runs after KILL"
                )));
            }
        }
    }
}
