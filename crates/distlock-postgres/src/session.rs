//! Which server session a connection is (ending one from another connection
//! is `ending`'s).
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
use sqlx::Row;
use sqlx::postgres::PgRow;

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
