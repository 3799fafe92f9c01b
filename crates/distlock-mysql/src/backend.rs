//! What the three strategies' [`Backend`](distlock_core::adapter::Backend)
//! impls share: the lock table at one server (opened and checked once at
//! connect), and the statements they run alike.
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
use crate::keys::{TableName, counter_name};
use crate::pool::{Conn, Pool, Statement};
use crate::protocol::{
    HELD_FLAG, KILL_CONNECTION, SESSION_LISTED, Statements, Strategy, TABLE_COMMENT,
};
use distlock_core::LockError;
use distlock_core::adapter::{Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, UndoFuture};
pub(crate) use distlock_sql::settle::{Settle, retry_until};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Autocommit connections for single statements.
    pub pool: Pool,
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
        endpoint: String,
        create: bool,
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
                         the distlock-mysql crate docs"
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
        })
    }

    /// The public error for a failed statement.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(&crate::error::TEXTS, &self.endpoint)
    }

    /// Runs the autocommit statement `build()` makes, retried under row-lock
    /// contention for at most the reply timeout (renew, release and operator
    /// actions have no wait of their own), and returns the rows it matched.
    pub async fn run_settled(&self, build: impl Fn() -> Statement) -> Result<u64, LockError> {
        let mut retry = Settle::new(WaitUntil::Deadline(Instant::now() + self.pool.timeout()));
        let done = async {
            loop {
                let mut conn = self.pool.get().await?;
                match conn.execute(build()).await {
                    Ok(done) => return Ok(done),
                    Err(e) => retry.again(e).await?,
                }
            }
        };
        Ok(done
            .await
            .map_err(|e: DbError| self.error(e))?
            .rows_affected())
    }

    /// Runs a compare-owner `UPDATE`/`DELETE`: one matched row means it was ours.
    pub async fn compare_owner(
        &self,
        build: impl Fn() -> Statement,
    ) -> Result<Ownership, LockError> {
        match self.run_settled(build).await? {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }

    /// Raises the counter row of `row` on `conn` and returns the new token,
    /// retrying under row-lock contention until `until`.
    pub async fn bump_counter(
        &self,
        conn: &mut Conn,
        row: &[u8],
        until: WaitUntil,
    ) -> Result<u64, DbError> {
        let counter = counter_name(row);
        let bump = || sqlx::query(self.sql.bump_counter.clone()).bind(counter.clone());
        let mut retry = Settle::new(until);
        let done = loop {
            match conn.execute(bump()).await {
                Ok(done) => break done,
                Err(e) => retry.again(e).await?,
            }
        };
        match done.last_insert_id() {
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

/// Builds one statement, again for each retry.
pub(crate) type MakeStatement = Box<dyn Fn() -> Statement + Send + Sync>;

/// What an abandoned acquire leaves to undo (a [`CancelGuard`]'s state).
///
/// [`CancelGuard`]: distlock_core::toolkit::CancelGuard
pub(crate) struct Undo {
    pub table: Arc<Table>,
    /// The connection whose statement was cut off, if one was: the server may
    /// not even have run it yet, and an undo that overtook it would match
    /// nothing while the statement then wins the lock for nobody.
    pub in_flight: Option<u64>,
    /// The statement that gives back what the attempt may have won.
    pub make: MakeStatement,
}

/// Runs an [`Undo`] in the background: first ends the cut-off session
/// (`KILL`, then until `PROCESSLIST` no longer lists it: a session ends only
/// after its statement is done, so whatever it won is in place), then the
/// statement, retried under row-lock contention for up to the reply timeout.
/// If it cannot run, the ttl (or, for a session, the server's `wait_timeout`)
/// frees the lock.
pub(crate) fn undo(state: Undo) -> Option<UndoFuture> {
    Some(Box::pin(async move {
        let table = &state.table;
        if let Some(id) = state.in_flight
            && let Err(e) = table.end_session(id).await
        {
            tracing::debug!(error = %e, "could not see a cut-off session end; undoing anyway");
        }
        if let Err(e) = table.run_settled(state.make).await {
            tracing::debug!(error = %e, "the undo of an abandoned acquire failed; the lock expires instead");
        }
    }))
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
