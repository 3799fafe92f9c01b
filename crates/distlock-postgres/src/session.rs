//! Which server session a connection is, and ending one from another
//! connection.
//!
//! A backend pid alone does not name a session: once a backend exits, the OS
//! may hand its pid to the next backend the server forks (`pid_max` is often
//! 32768, and a busy client opens thousands of sessions). An undo that ends a
//! cut-off session after its socket closed would then end a stranger, say an
//! `advisory` holder whose lock silently dies. So a session is the pair (pid,
//! `backend_start`), read once when the connection is made, and every
//! termination and every "is it gone yet" matches both: a pair that no longer
//! exists ends nothing.

use crate::error::DbError;
use crate::pool::Pool;
use crate::protocol::{SESSION_LISTED, SESSION_TERMINATE};
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Backoff;
use sqlx::Row;
use sqlx::postgres::PgRow;
use std::time::{Duration, Instant};

/// How often an undo looks whether a terminated session is gone, at most.
const SESSION_GONE_POLL: Duration = Duration::from_millis(50);

/// One server session: its backend pid and when that backend started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Session {
    pub pid: i32,
    /// `backend_start` in microseconds since the Unix epoch, as the server
    /// computes it (so the same session always yields the same number).
    pub started: i64,
}

impl Session {
    /// A session from a row of (pid, start µs), as the statements return it.
    pub fn from_row(row: &PgRow) -> Result<Session, DbError> {
        let pid = row.try_get::<i32, _>(0).map_err(DbError::Sql)?;
        let started = row.try_get::<Option<i64>, _>(1).map_err(DbError::Sql)?;
        let started = started.ok_or_else(|| {
            DbError::Protocol(format!(
                "the server shows no backend_start for session {pid}; the role needs to see its own \
                 sessions in pg_stat_activity"
            ))
        })?;
        Ok(Session { pid, started })
    }
}

impl std::fmt::Display for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "session {}", self.pid)
    }
}

/// Terminates `session` if it still exists; `Ok(true)` when a backend was
/// signalled. Runs on a pooled connection.
pub(crate) async fn terminate(pool: &Pool, session: Session) -> Result<bool, DbError> {
    let mut conn = pool.get().await?;
    let rows = conn.fetch_all(terminate_statement(session)).await?;
    signalled(&rows)
}

/// Ends `session` and returns once the server no longer lists it: a session
/// ends only after its statement is done, so whatever that statement won is
/// in place (or, for a session lock, given back).
pub(crate) async fn end(pool: &Pool, session: Session) -> Result<(), DbError> {
    let mut conn = pool.get().await?;
    conn.fetch_all(terminate_statement(session)).await?;
    let until = WaitUntil::Deadline(Instant::now() + pool.timeout());
    let mut backoff = Backoff::new(Duration::from_millis(2), SESSION_GONE_POLL);
    loop {
        let listed = sqlx::query(SESSION_LISTED)
            .bind(session.pid)
            .bind(session.started);
        let listed = conn.fetch_one(listed).await?;
        if listed.try_get::<i64, _>(0).map_err(DbError::Sql)? == 0 {
            return Ok(());
        }
        if !backoff.pause(SESSION_GONE_POLL, until).await {
            return Err(DbError::Protocol(format!(
                "{session} still runs after pg_terminate_backend"
            )));
        }
    }
}

fn terminate_statement(session: Session) -> crate::pool::Statement {
    sqlx::query(SESSION_TERMINATE)
        .bind(session.pid)
        .bind(session.started)
}

/// Whether any row of a termination says its backend was signalled.
fn signalled(rows: &[PgRow]) -> Result<bool, DbError> {
    for row in rows {
        if row.try_get::<bool, _>(0).map_err(DbError::Sql)? {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests;
