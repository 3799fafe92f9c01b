//! Ending a server session from another connection: by (pid, start), never
//! by pid alone (see `session`), so an undo that comes late hits nobody.

use crate::error::DbError;
use crate::pool::{Pool, Statement};
use crate::protocol::{SESSION_LISTED, SESSION_TERMINATE};
use crate::session::Session;
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Backoff;
use sqlx::Row;
use sqlx::postgres::PgRow;
use std::time::{Duration, Instant};

/// How often an undo looks whether a terminated session is gone, at most.
const SESSION_GONE_POLL: Duration = Duration::from_millis(50);

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

fn terminate_statement(session: Session) -> Statement {
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
