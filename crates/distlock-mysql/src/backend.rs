//! What the three strategies' [`Backend`](distlock_core::backend::Backend)
//! impls share: the lock table at one server (opened and checked once at
//! connect), and the statements they run alike.
//!
//! Invariant of every strategy: a table belongs to one strategy (its comment
//! says which), every expiry is compared with `NOW(6)` on the server, and a
//! name's fence only ever rises.

use crate::error::{BACKEND, DbError};
use crate::keys::{TableName, counter_name};
use crate::pool::{Conn, Pool, Statement};
use crate::protocol::{HELD_FLAG, Statements, Strategy, TABLE_COMMENT};
use distlock_core::LockError;
use distlock_core::backend::Ownership;
use distlock_core::toolkit::UndoFuture;
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The lock table of one client: its strategy, statements and connections.
#[derive(Debug)]
pub(crate) struct Table {
    pub strategy: Strategy,
    pub name: TableName,
    pub sql: Statements,
    /// Autocommit connections for single statements.
    pub pool: Pool,
    /// The server, without credentials, for messages.
    pub endpoint: String,
    /// When this client last read InnoDB's lock tables (see `inspect`).
    pub innodb_read: tokio::sync::Mutex<Option<Instant>>,
}

impl Table {
    /// Creates the table if missing (when asked) and checks that it belongs to
    /// `strategy`, on a connection of `pool`.
    pub async fn open(
        strategy: Strategy,
        name: TableName,
        pool: Pool,
        endpoint: String,
        create: bool,
    ) -> Result<Table, LockError> {
        let err = |e: DbError| e.into_lock_error(&endpoint);
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
                sqlx::query(TABLE_COMMENT).bind(name.as_str().to_owned()),
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
                         docs/backends/mysql.md"
                    ),
                ));
            }
        }
        drop(conn);
        Ok(Table {
            strategy,
            sql: Statements::new(&name),
            name,
            pool,
            endpoint,
            innodb_read: tokio::sync::Mutex::new(None),
        })
    }

    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&self.endpoint)
    }

    /// Runs a compare-owner `UPDATE`/`DELETE`: one matched row means it was ours.
    pub async fn compare_owner(&self, statement: Statement) -> Result<Ownership, LockError> {
        let outcome = async {
            let mut conn = self.pool.get().await?;
            conn.execute(statement).await
        };
        match outcome.await.map_err(|e| self.error(e))?.rows_affected() {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }

    /// Raises the counter row of `row` on `conn` and returns the new token.
    pub async fn bump_counter(&self, conn: &mut Conn, row: &[u8]) -> Result<u64, DbError> {
        let bump = sqlx::query(self.sql.bump_counter.clone()).bind(counter_name(row));
        match conn.execute(bump).await?.last_insert_id() {
            token if token != 0 && token & HELD_FLAG == 0 => Ok(token),
            other => Err(DbError::Protocol(format!(
                "the fence counter returned {other}"
            ))),
        }
    }
}

/// A ttl in whole microseconds, as `INTERVAL ? MICROSECOND` takes it.
pub(crate) fn micros(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)
}

/// The undo of an abandoned acquire (a [`CancelGuard`]'s): `statement` on a
/// connection of its own, in the background. If it cannot run, the ttl (or, for
/// a session, the server's `wait_timeout`) frees the lock.
///
/// [`CancelGuard`]: distlock_core::toolkit::CancelGuard
pub(crate) fn undo((table, statement): (Arc<Table>, Statement)) -> Option<UndoFuture> {
    Some(Box::pin(async move {
        let outcome = match table.pool.get().await {
            Ok(mut conn) => conn.execute(statement).await.map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "the undo of an abandoned acquire failed; the lock expires instead");
        }
    }))
}
