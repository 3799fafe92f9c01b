//! The crate's one error type for talking to the server, and its conversion into
//! [`LockError`] at the boundary (with the endpoint, never the credentials).

pub(crate) use distlock_sql::db_error::DbError;
use distlock_sql::db_error::ErrorTexts;

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

/// The adapter's words for its errors.
pub(crate) const TEXTS: ErrorTexts = ErrorTexts {
    backend: BACKEND,
    config: config_reason,
    tls_check: "check ssl-mode and that ssl-ca names the CA that signed the server's certificate \
                (give ssl-cert and ssl-key if the server wants a client certificate; TLS needs \
                the `tls` feature)",
    tls_refusal: |e| is_tls_failure(&e.to_string()),
};

/// The configuration problem a server error names, if it is one.
fn config_reason(e: &DbError, endpoint: &str) -> Option<String> {
    Some(match e.number()? {
        code::ACCESS_DENIED => format!(
            "the server at {endpoint} refused the login ({e}); check the user and password \
             (a user created with REQUIRE X509 also needs a TLS client certificate: \
             ssl-cert and ssl-key)"
        ),
        code::DB_ACCESS_DENIED | code::BAD_DB => format!(
            "cannot use the database at {endpoint} ({e}); check the database name in the URL and the user's grants"
        ),
        code::NO_SUCH_TABLE => format!(
            "a table is missing at {endpoint} ({e}); enable create_table, or create it with the SQL in \
             the distlock-mysql docs (the semaphore and read-write lock tables are the lock table's name \
             plus _sem and _rw)"
        ),
        code::TABLE_ACCESS_DENIED => format!(
            "the user lacks a privilege on the lock table at {endpoint} ({e}); grant CREATE, SELECT, INSERT, \
             UPDATE and DELETE on it, or create the table yourself (the SQL is in the distlock-mysql crate docs) and set create_table(false)"
        ),
        code::PRIVILEGE_NEEDED | code::NOT_THREAD_OWNER => format!(
            "the user lacks a privilege at {endpoint} ({e}); force-unlocking a for_update lock \
             ends the holder's session with KILL, which needs the holders' own user (or CONNECTION \
             ADMIN / SUPER)"
        ),
        _ => return None,
    })
}

/// Whether an I/O error's text is rustls refusing a certificate or a TLS alert
/// from the server, rather than a network failure.
fn is_tls_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["certificate", "fatal alert", "handshake"]
        .iter()
        .any(|word| lower.contains(word))
}
