//! What the two strategies' [`Backend`](distlock_core::adapter::Backend)
//! impls share: the lock table at one server (opened and checked once at
//! connect), the wake-ups of its channel, and the undo of a cut-off statement.
//!
//! Invariant of both strategies: a table belongs to one strategy (its comment
//! says which), every expiry is judged by the server clock (`now()`, or the
//! server's own idle timeout), and a name's fence only ever rises.

use crate::ending;
use crate::error::{BACKEND, DbError, code};
use crate::keys::{TableName, check_room_for_primitives, wake_payload};
use crate::pool::{Conn, Pool, Statement};
use crate::protocol::{Statements, Strategy, TABLE_COMMENT};
use crate::session::Session;
use crate::wake::Wakeups;
use distlock_core::toolkit::UndoFuture;
use distlock_core::{LockError, LockKey};
use sqlx::{Row, SqlStr};
use std::sync::Arc;
use std::time::Duration;

/// The lock table of one client: its strategy, namespace, statements,
/// connections and wake-ups.
#[derive(Debug)]
pub(crate) struct Table {
    pub strategy: Strategy,
    pub name: TableName,
    pub namespace: String,
    pub sql: Statements,
    /// Connections for single statements.
    pub pool: Pool,
    /// The server, without credentials, for messages.
    pub endpoint: String,
    pub wakeups: Wakeups,
}

impl Table {
    /// Creates the table if missing (when asked), marks an unmarked table as
    /// `strategy`'s, checks that it belongs to `strategy`, and starts listening.
    pub async fn open(
        strategy: Strategy,
        name: TableName,
        namespace: String,
        pool: Pool,
        endpoint: String,
        create: bool,
    ) -> Result<Table, LockError> {
        if strategy == Strategy::VersionCas {
            check_room_for_primitives(&name)?;
        }
        let err = |e: DbError| e.into_lock_error(&crate::error::TEXTS, &endpoint);
        let mut conn = pool.get().await.map_err(err)?;
        if create {
            create_if_missing(&mut conn, Statements::create_table(&name))
                .await
                .map_err(err)?;
        }
        let read = sqlx::query(TABLE_COMMENT).bind(name.as_str().to_owned());
        let row = conn.fetch_one(read).await.map_err(err)?;
        let decoded = |e| err(DbError::Sql(e));
        let exists: bool = row.try_get(0).map_err(decoded)?;
        let comment: Option<String> = row.try_get(1).map_err(decoded)?;
        let wanted = strategy.table_comment();
        match (exists, comment) {
            (false, _) => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table \"{name}\" does not exist at {endpoint}; enable create_table or create it with the \
                         SQL in docs/backends/postgres.md"
                    ),
                ));
            }
            (true, None) => {
                conn.execute(sqlx::query(Statements::mark_table(&name, strategy)))
                    .await
                    .map_err(err)?;
            }
            (true, Some(found)) if found == wanted => {}
            (true, Some(found)) => {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "table \"{name}\" at {endpoint} is marked `{found}`, not `{wanted}`: strategies cannot share \
                         a table; use another table for {}, or mark a hand-made table with \
                         COMMENT ON TABLE \"{name}\" IS '{wanted}'",
                        strategy.as_str()
                    ),
                ));
            }
        }
        drop(conn);
        let sql = Statements::new(&name);
        let wakeups = Wakeups::listen(
            pool.options(),
            &sql.channel,
            pool.connect_timeout(),
            &endpoint,
        )
        .await?;
        Ok(Table {
            strategy,
            name,
            namespace,
            sql,
            pool,
            endpoint,
            wakeups,
        })
    }

    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&crate::error::TEXTS, &self.endpoint)
    }

    /// The payload a release of `key` notifies.
    pub fn payload(&self, key: &LockKey) -> String {
        wake_payload(&self.namespace, key.as_str())
    }

    /// Runs one statement on a pooled connection and returns the rows it
    /// changed.
    pub async fn run(&self, statement: Statement) -> Result<u64, DbError> {
        let mut conn = self.pool.get().await?;
        Ok(conn.execute(statement).await?.rows_affected())
    }

    /// Runs one statement on a pooled connection and returns how many rows it
    /// returned.
    pub async fn count_rows(&self, statement: Statement) -> Result<usize, DbError> {
        let mut conn = self.pool.get().await?;
        Ok(conn.fetch_all(statement).await?.len())
    }
}

/// Runs one `CREATE TABLE IF NOT EXISTS`. Two clients creating a table at
/// once can both pass IF NOT EXISTS; the loser fails creating the table's row
/// type or on the catalog's unique index, and the table is there.
async fn create_if_missing(conn: &mut Conn, create: SqlStr) -> Result<(), DbError> {
    let lost_race = [
        code::UNIQUE_VIOLATION,
        code::DUPLICATE_TABLE,
        code::DUPLICATE_OBJECT,
    ];
    match conn.execute(sqlx::query(create)).await {
        Err(e) if e.code().is_some_and(|c| lost_race.contains(&c)) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    }
}

/// A ttl in whole microseconds, as the statements bind it.
pub(crate) fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

/// Builds one statement.
pub(crate) type MakeStatement = Box<dyn Fn() -> Statement + Send + Sync>;

/// What an abandoned acquire leaves to undo (a [`CancelGuard`]'s state).
///
/// [`CancelGuard`]: distlock_core::toolkit::CancelGuard
pub(crate) struct Undo {
    pub table: Arc<Table>,
    /// The session whose statement was cut off, if one was: the server may not
    /// even have run it yet, and an undo that overtook it would match nothing
    /// while the statement then wins the lock for nobody.
    pub in_flight: Option<Session>,
    /// The statement that gives back what the attempt may have won (none when
    /// ending the session is the whole undo).
    pub make: Option<MakeStatement>,
}

/// Runs an [`Undo`] in the background: first ends the cut-off session
/// (`pg_terminate_backend`, then until `pg_stat_activity` no longer lists it,
/// both matching its pid and start so a reused pid is never hit),
/// then the statement. If it cannot run, the ttl (or, for a session lock, the
/// session's end) frees the lock.
pub(crate) fn undo(state: Undo) -> Option<UndoFuture> {
    Some(Box::pin(async move {
        let table = &state.table;
        if let Some(cut_off) = state.in_flight
            && let Err(e) = ending::end(&table.pool, cut_off).await
        {
            tracing::debug!(error = %e, "could not see a cut-off session end; undoing anyway");
        }
        if let Some(make) = state.make
            && let Err(e) = table.run(make()).await
        {
            tracing::debug!(error = %e, "the undo of an abandoned acquire failed; the lock expires instead");
        }
    }))
}
