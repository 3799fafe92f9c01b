//! The crate's one error type for talking to the server, and its conversion into
//! [`LockError`] at the boundary (with the endpoint, never the credentials).

use distlock_core::LockError;
use sqlx::mysql::MySqlDatabaseError;
use std::time::Duration;

pub(crate) const BACKEND: &str = "mysql";

/// Server error numbers the adapter acts on.
pub(crate) mod code {
    /// Access denied for user (wrong user or password).
    pub const ACCESS_DENIED: u16 = 1045;
    /// Access denied to the database.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// Unknown database.
    pub const BAD_DB: u16 = 1049;
    /// Unknown table.
    pub const NO_SUCH_TABLE: u16 = 1146;
    /// A command (such as CREATE) is denied to the user on the table.
    pub const TABLE_ACCESS_DENIED: u16 = 1142;
    /// Duplicate entry for a unique key.
    pub const DUPLICATE_KEY: u16 = 1062;
    /// Lock wait timeout exceeded (also MariaDB's answer to `NOWAIT`).
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// Deadlock found; the transaction was rolled back.
    pub const DEADLOCK: u16 = 1213;
    /// MySQL 8's answer to `NOWAIT` on a locked row.
    pub const LOCK_NOWAIT: u16 = 3572;
    /// Query execution was interrupted (`KILL QUERY`).
    /// MariaDB: the connection was killed.
    pub const CONNECTION_KILLED: u16 = 1927;
    /// A global privilege is missing.
    pub const PRIVILEGE_NEEDED: u16 = 1227;
    /// `KILL` of a thread that no longer exists.
    pub const UNKNOWN_THREAD: u16 = 1094;
    /// `KILL` of a thread the user does not own.
    pub const NOT_THREAD_OWNER: u16 = 1095;
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

impl DbError {
    /// The server's error number, for errors the server sent.
    pub fn number(&self) -> Option<u16> {
        match self {
            DbError::Sql(sqlx::Error::Database(e)) => e
                .try_downcast_ref::<MySqlDatabaseError>()
                .map(MySqlDatabaseError::number),
            _ => None,
        }
    }

    /// True when another transaction refused this statement its row locks
    /// (InnoDB rolled the statement back): trying again is safe and may succeed.
    pub fn is_contended(&self) -> bool {
        matches!(
            self.number(),
            Some(code::LOCK_WAIT_TIMEOUT | code::DEADLOCK)
        )
    }

    /// True when contention refused this statement, or its retries ran out on it.
    pub fn lost_to_contention(&self) -> bool {
        self.is_contended() || matches!(self, DbError::Contended(_))
    }

    /// True when the statement is over on the server: it answered (a result, an
    /// error packet, a reply the adapter cannot use) or kept refusing. False when
    /// no answer came (reply timeout, connection lost): it may still run.
    pub fn answered(&self) -> bool {
        self.number().is_some() || matches!(self, DbError::Protocol(_) | DbError::Contended(_))
    }

    /// True if the connection is still usable afterwards: the server answered
    /// with an error packet and the session goes on.
    pub fn keeps_connection(&self) -> bool {
        matches!(self.number(), Some(n) if n != code::CONNECTION_KILLED)
    }

    /// Converts into the public error. `endpoint` never holds credentials.
    pub fn into_lock_error(self, endpoint: &str) -> LockError {
        let config = |reason: String| LockError::config(BACKEND, reason);
        match self.number() {
            Some(code::ACCESS_DENIED) => {
                return config(format!(
                    "the server at {endpoint} refused the login ({self}); check the user and password \
                     (a user created with REQUIRE X509 also needs a TLS client certificate: \
                     ssl-cert and ssl-key)"
                ));
            }
            Some(code::DB_ACCESS_DENIED | code::BAD_DB) => {
                return config(format!(
                    "cannot use the database at {endpoint} ({self}); check the database name in the URL and the user's grants"
                ));
            }
            Some(code::NO_SUCH_TABLE) => {
                return config(format!(
                    "a table is missing at {endpoint} ({self}); enable create_table, or create it with the SQL in \
                     the distlock-mysql docs (the semaphore and read-write lock tables are the lock table's name \
                     plus _sem and _rw)"
                ));
            }
            Some(code::TABLE_ACCESS_DENIED) => {
                return config(format!(
                    "the user lacks a privilege on the lock table at {endpoint} ({self}); grant CREATE, SELECT, INSERT, \
                     UPDATE and DELETE on it, or create the table yourself (the SQL is in the distlock-mysql crate docs) and set create_table(false)"
                ));
            }
            Some(code::PRIVILEGE_NEEDED | code::NOT_THREAD_OWNER) => {
                return config(format!(
                    "the user lacks a privilege at {endpoint} ({self}); force-unlocking a for_update lock \
                     ends the holder's session with KILL, which needs the holders' own user (or CONNECTION \
                     ADMIN / SUPER)"
                ));
            }
            _ => {}
        }
        match self {
            DbError::Sql(sqlx::Error::Database(_))
            | DbError::Protocol(_)
            | DbError::Contended(_) => LockError::backend(BACKEND, self),
            DbError::Sql(sqlx::Error::Configuration(e)) => config(format!("{e}")),
            DbError::Sql(sqlx::Error::Tls(e)) => config(tls_failed(endpoint, &e)),
            // rustls refuses a certificate (or the server sends an alert) inside
            // the handshake's I/O: retrying cannot help, the settings can.
            DbError::Sql(sqlx::Error::Io(e)) if is_tls_failure(&e.to_string()) => {
                config(tls_failed(endpoint, &e))
            }
            other => LockError::Unavailable {
                backend: BACKEND,
                endpoint: endpoint.to_owned(),
                source: Box::new(other),
            },
        }
    }
}

fn tls_failed(endpoint: &str, e: &dyn std::fmt::Display) -> String {
    format!(
        "TLS to {endpoint} failed: {e}; check ssl-mode and that ssl-ca names the CA that signed \
         the server's certificate (give ssl-cert and ssl-key if the server wants a client \
         certificate; TLS needs the `tls` feature)"
    )
}

/// Whether an I/O error's text is rustls refusing a certificate or a TLS alert
/// from the server, rather than a network failure.
fn is_tls_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["certificate", "fatal alert", "handshake"]
        .iter()
        .any(|word| lower.contains(word))
}
