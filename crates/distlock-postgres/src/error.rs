//! The crate's one error type for talking to the server, and its conversion into
//! [`LockError`] at the boundary (with the endpoint, never the credentials).

use distlock_core::LockError;
use std::time::Duration;

pub(crate) const BACKEND: &str = "postgres";

/// SQLSTATE codes the adapter acts on.
pub(crate) mod code {
    /// `unique_violation`.
    pub const UNIQUE_VIOLATION: &str = "23505";
    /// `duplicate_table` (a concurrent `CREATE TABLE IF NOT EXISTS`).
    pub const DUPLICATE_TABLE: &str = "42P07";
    /// `duplicate_object` (a concurrent `CREATE TABLE IF NOT EXISTS` that
    /// lost on the table's row type: `type "…" already exists`).
    pub const DUPLICATE_OBJECT: &str = "42710";
    /// `invalid_password`.
    pub const INVALID_PASSWORD: &str = "28P01";
    /// `invalid_authorization_specification` (no such role, pg_hba refusal).
    pub const INVALID_AUTHORIZATION: &str = "28000";
    /// `invalid_catalog_name` (no such database).
    pub const INVALID_CATALOG: &str = "3D000";
    /// `insufficient_privilege`.
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    /// `deadlock_detected`.
    pub const DEADLOCK: &str = "40P01";
    /// `serialization_failure`.
    pub const SERIALIZATION: &str = "40001";
    /// `lock_not_available`.
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
    /// `admin_shutdown` (`pg_terminate_backend`, server shutdown).
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    /// `idle_session_timeout`.
    pub const IDLE_SESSION_TIMEOUT: &str = "57P05";
}

/// The message of a failed TLS handshake.
fn tls_failed(endpoint: &str, e: &dyn std::fmt::Display) -> String {
    format!(
        "TLS to {endpoint} failed: {e}; check sslmode and that sslrootcert names the CA \
         that signed the server's certificate (TLS needs the `tls` feature)"
    )
}

/// True when the driver's I/O error is rustls refusing the handshake (an
/// untrusted certificate, a name mismatch): a setting to fix, not an outage.
#[cfg(feature = "tls")]
fn is_tls_refusal(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// Without TLS support no handshake is ever made.
#[cfg(not(feature = "tls"))]
fn is_tls_refusal(_: &std::io::Error) -> bool {
    false
}

/// What went wrong with one statement or connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DbError {
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
}

impl DbError {
    /// The server's SQLSTATE, for errors the server sent.
    pub fn code(&self) -> Option<String> {
        match self {
            DbError::Sql(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    fn code_is(&self, codes: &[&str]) -> bool {
        self.code().is_some_and(|c| codes.contains(&c.as_str()))
    }

    /// True when another transaction refused this statement (deadlock,
    /// serialization failure): it was rolled back whole, retrying may succeed.
    pub fn is_contended(&self) -> bool {
        self.code_is(&[
            code::DEADLOCK,
            code::SERIALIZATION,
            code::LOCK_NOT_AVAILABLE,
        ])
    }

    /// True when the statement is over on the server: it answered (a result, an
    /// error, a reply the adapter cannot use). False when no answer came
    /// (reply timeout, connection lost): it may still run.
    pub fn answered(&self) -> bool {
        (self.code().is_some() && !self.ends_session()) || matches!(self, DbError::Protocol(_))
    }

    /// True when the server ended the session with this error.
    pub fn ends_session(&self) -> bool {
        self.code_is(&[code::ADMIN_SHUTDOWN, code::IDLE_SESSION_TIMEOUT])
            || self
                .code()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P"))
    }

    /// True if the connection is still usable afterwards: the server answered
    /// with an error and the session goes on.
    pub fn keeps_connection(&self) -> bool {
        self.code().is_some() && !self.ends_session()
    }

    /// Converts into the public error. `endpoint` never holds credentials.
    pub fn into_lock_error(self, endpoint: &str) -> LockError {
        let config = |reason: String| LockError::config(BACKEND, reason);
        if self.code_is(&[code::INVALID_PASSWORD, code::INVALID_AUTHORIZATION]) {
            return config(format!(
                "the server at {endpoint} refused the login ({self}); check the user and password \
                 (and pg_hba.conf)"
            ));
        }
        if self.code_is(&[code::INVALID_CATALOG]) {
            return config(format!(
                "cannot use the database at {endpoint} ({self}); check the database name in the URL"
            ));
        }
        if self.code_is(&[code::INSUFFICIENT_PRIVILEGE]) {
            return config(format!(
                "the user lacks a privilege at {endpoint} ({self}); grant CREATE on the schema (or create \
                 the table yourself, see docs/backends/postgres.md, and set create_table=false) and \
                 SELECT, INSERT, UPDATE on the lock table"
            ));
        }
        match self {
            DbError::Sql(sqlx::Error::Database(_)) if !self.ends_session() => {
                LockError::backend(BACKEND, self)
            }
            DbError::Protocol(_) => LockError::backend(BACKEND, self),
            DbError::Sql(sqlx::Error::Configuration(e)) => config(format!("{e}")),
            DbError::Sql(sqlx::Error::Tls(e)) => config(tls_failed(endpoint, &e)),
            DbError::Sql(sqlx::Error::Io(ref e)) if is_tls_refusal(e) => {
                config(tls_failed(endpoint, e))
            }
            other => LockError::Unavailable {
                backend: BACKEND,
                endpoint: endpoint.to_owned(),
                source: Box::new(other),
            },
        }
    }
}
