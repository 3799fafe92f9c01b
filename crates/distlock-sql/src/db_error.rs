//! The SQL adapters' one error type for talking to the server, and its
//! conversion into [`LockError`] at the boundary (with the endpoint, never the
//! credentials). What an error means is decided here once, from the server's
//! own codes of either database; each adapter gives only its texts
//! ([`ErrorTexts`]). Not a stable API.

use crate::error::contended;
use distlock_core::LockError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::postgres::PgDatabaseError;
use std::time::Duration;

/// MySQL: query execution was interrupted (`KILL QUERY`); MariaDB: the
/// connection was killed.
const MYSQL_CONNECTION_KILLED: u16 = 1927;
/// PostgreSQL: `admin_shutdown` (`pg_terminate_backend`, server shutdown),
/// `idle_session_timeout`.
const PG_SESSION_ENDED: [&str; 2] = ["57P01", "57P05"];

/// What went wrong with one statement or connection.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The driver or the server reported an error.
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
    /// No reply came in time; the connection was dropped.
    #[error(
        "no reply from the server within {0:?} (raise the URL's timeout if the server is slow)"
    )]
    TimedOut(Duration),
    /// The server replied something the adapter cannot use.
    #[error("unexpected reply from the server: {0}")]
    Protocol(String),
    /// Every try of a statement lost to other transactions on the same rows
    /// (deadlock victim, lock wait timeout) until its retry budget ended. Each
    /// refused statement was rolled back, so nothing of it took effect.
    #[error(
        "the lock's rows stayed locked by other transactions for {0:?} (deadlock or lock wait \
         timeout each time; nothing was changed); retry later, or find the long transaction \
         holding them"
    )]
    Contended(Duration),
}

/// An adapter's texts for [`DbError::into_lock_error`].
#[derive(Debug)]
pub struct ErrorTexts {
    /// The backend name in errors.
    pub backend: &'static str,
    /// The configuration problem a server error names, as a sentence naming
    /// the endpoint (a refused login, a missing database, table or grant), if
    /// it is one.
    pub config: fn(&DbError, &str) -> Option<String>,
    /// What to check when TLS fails, after "TLS to {endpoint} failed: {error}; ".
    pub tls_check: &'static str,
    /// Whether an I/O error is TLS refusing the handshake (a setting to fix,
    /// not an outage).
    pub tls_refusal: fn(&std::io::Error) -> bool,
}

impl DbError {
    /// MySQL's error number, for errors a MySQL server sent.
    pub fn number(&self) -> Option<u16> {
        match self {
            DbError::Sql(sqlx::Error::Database(e)) => e
                .try_downcast_ref::<MySqlDatabaseError>()
                .map(MySqlDatabaseError::number),
            _ => None,
        }
    }

    /// PostgreSQL's SQLSTATE, for errors a PostgreSQL server sent.
    pub fn code(&self) -> Option<&str> {
        match self {
            DbError::Sql(sqlx::Error::Database(e)) => e
                .try_downcast_ref::<PgDatabaseError>()
                .map(PgDatabaseError::code),
            _ => None,
        }
    }

    /// True when another transaction refused this statement (deadlock, lock
    /// wait timeout, serialization failure): it was rolled back, and trying
    /// again is safe and may succeed.
    pub fn is_contended(&self) -> bool {
        matches!(self, DbError::Sql(e) if contended(e))
    }

    /// True when contention refused this statement, or its retries ran out on it.
    pub fn lost_to_contention(&self) -> bool {
        self.is_contended() || matches!(self, DbError::Contended(_))
    }

    /// True when a PostgreSQL server ended the session with this error.
    pub fn ends_session(&self) -> bool {
        self.code().is_some_and(|c| {
            PG_SESSION_ENDED.contains(&c) || c.starts_with("08") || c.starts_with("57P")
        })
    }

    /// True when the statement is over on the server: it answered (a result, an
    /// error, a reply the adapter cannot use) or kept refusing. False when no
    /// answer came (reply timeout, connection lost, a PostgreSQL session
    /// ended): it may still run.
    pub fn answered(&self) -> bool {
        let server = self.number().is_some() || (self.code().is_some() && !self.ends_session());
        server || matches!(self, DbError::Protocol(_) | DbError::Contended(_))
    }

    /// True if the connection is still usable afterwards: the server answered
    /// with an error and the session goes on.
    pub fn keeps_connection(&self) -> bool {
        match self.number() {
            Some(number) => number != MYSQL_CONNECTION_KILLED,
            None => self.code().is_some() && !self.ends_session(),
        }
    }

    /// Converts into the public error, with `texts`' words. `endpoint` never
    /// holds credentials.
    pub fn into_lock_error(self, texts: &ErrorTexts, endpoint: &str) -> LockError {
        let config = |reason: String| LockError::config(texts.backend, reason);
        if let Some(reason) = (texts.config)(&self, endpoint) {
            return config(reason);
        }
        let tls_failed = |e: &dyn std::fmt::Display| {
            format!("TLS to {endpoint} failed: {e}; {}", texts.tls_check)
        };
        match self {
            DbError::Sql(sqlx::Error::Database(_))
            | DbError::Protocol(_)
            | DbError::Contended(_)
                if self.answered() =>
            {
                LockError::backend(texts.backend, self)
            }
            DbError::Sql(sqlx::Error::Configuration(e)) => config(format!("{e}")),
            DbError::Sql(sqlx::Error::Tls(e)) => config(tls_failed(&e)),
            DbError::Sql(sqlx::Error::Io(ref e)) if (texts.tls_refusal)(e) => config(tls_failed(e)),
            other => LockError::Unavailable {
                backend: texts.backend,
                endpoint: endpoint.to_owned(),
                source: Box::new(other),
            },
        }
    }
}
