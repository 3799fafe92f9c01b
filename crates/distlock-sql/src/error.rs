//! Turning sqlx errors into [`LockError`]s: connection trouble is
//! [`LockError::Unavailable`], a login or database the server refuses is
//! [`LockError::Config`], anything else the server says is [`LockError::Backend`].
//! No message ever carries a password: endpoints are rebuilt from host, port
//! and database only.

use distlock_core::LockError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::postgres::PgDatabaseError;

/// The backend name in errors that do not tell which database they came from
/// (a lost connection on the caller's side, a bad fence table name, which
/// either database would refuse).
pub(crate) const ANY_SQL: &str = "sql";

/// The endpoint named when a statement on the caller's own connection fails:
/// the crate never sees that connection's URL.
pub(crate) const CALLER_CONNECTION: &str = "the caller's connection";

/// PostgreSQL SQLSTATEs this crate acts on.
mod sqlstate {
    /// Wrong password.
    pub const INVALID_PASSWORD: &str = "28P01";
    /// No such role, or pg_hba refused.
    pub const INVALID_AUTHORIZATION: &str = "28000";
    /// No such database.
    pub const INVALID_CATALOG: &str = "3D000";
    /// Deadlock detected; the transaction was rolled back.
    pub const DEADLOCK: &str = "40P01";
    /// Serialization failure; run the transaction again.
    pub const SERIALIZATION: &str = "40001";
    /// `lock_timeout` reached.
    pub const LOCK_NOT_AVAILABLE: &str = "55P03";
}

/// What a server error means to this crate, on either database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    LoginRefused,
    BadDatabase,
    Contention,
}

/// Server error numbers this crate acts on.
mod code {
    /// Access denied to the database.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// Wrong user or password.
    pub const ACCESS_DENIED: u16 = 1045;
    /// Unknown database.
    pub const BAD_DB: u16 = 1049;
    /// Lock wait timeout exceeded.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// Deadlock found; InnoDB rolled the whole transaction back.
    pub const DEADLOCK: u16 = 1213;
}

/// Converts an error from a statement on the caller's connection (their own
/// statements or `commit`, too) into a [`LockError`], as [`crate::SqlFence`]
/// does for its own.
///
/// I/O failures become [`LockError::Unavailable`]; a deadlock (MySQL 1213,
/// PostgreSQL 40P01), a lock wait timeout (1205, 55P03) or a serialization
/// failure (40001) becomes a transient [`LockError::Backend`] for which
/// [`is_contention`] is true: roll back and retry the whole transaction.
///
/// ```no_run
/// # async fn run(mut tx: sqlx::Transaction<'_, sqlx::MySql>) -> Result<(), distlock_core::LockError> {
/// sqlx::query("UPDATE stock SET n = n - 1 WHERE sku = 42")
///     .execute(&mut *tx)
///     .await
///     .map_err(distlock_sql::map_error)?;
/// tx.commit().await.map_err(distlock_sql::map_error)?;
/// # Ok(()) }
/// ```
pub fn map_error(error: sqlx::Error) -> LockError {
    let backend = match &error {
        sqlx::Error::Database(e) if e.try_downcast_ref::<PgDatabaseError>().is_some() => "postgres",
        sqlx::Error::Database(e) if e.try_downcast_ref::<MySqlDatabaseError>().is_some() => "mysql",
        _ => ANY_SQL,
    };
    map_error_at(error, CALLER_CONNECTION, backend)
}

/// [`map_error`] naming `endpoint` (never with credentials) and `backend`.
pub(crate) fn map_error_at(error: sqlx::Error, endpoint: &str, backend: &'static str) -> LockError {
    let config = |reason: String| LockError::config(backend, reason);
    match meaning(&error) {
        Some(Meaning::LoginRefused) => {
            return config(format!(
                "the server at {endpoint} refused the login ({error}); check the user and password"
            ));
        }
        Some(Meaning::BadDatabase) => {
            return config(format!(
                "cannot use the database at {endpoint} ({error}); check the database name and \
                 the user's grants"
            ));
        }
        _ => {}
    }
    match error {
        sqlx::Error::Configuration(e) => config(e.to_string()),
        sqlx::Error::Tls(e) => config(format!("TLS to {endpoint} failed: {e}")),
        e @ (sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed) => LockError::Unavailable {
            backend,
            endpoint: endpoint.to_owned(),
            source: Box::new(e),
        },
        other => LockError::backend(backend, other),
    }
}

/// True when `error` is a deadlock (1213) or a lock wait timeout (1205) from
/// the server: another transaction held the rows. Roll the transaction back
/// (drop it) and run the whole of it again; nothing of it was committed.
///
/// ```no_run
/// # fn handle(error: distlock_core::LockError) {
/// if distlock_sql::is_contention(&error) {
///     // drop the transaction and start it over
/// }
/// # }
/// ```
pub fn is_contention(error: &LockError) -> bool {
    let LockError::Backend { source, .. } = error else {
        return false;
    };
    source.downcast_ref::<sqlx::Error>().is_some_and(contended)
}

/// True when the server refused the statement for contention (deadlock, lock
/// wait timeout, serialization failure) and rolled it back.
pub(crate) fn contended(error: &sqlx::Error) -> bool {
    meaning(error) == Some(Meaning::Contention)
}

/// What the server's error means, for errors the server sent.
fn meaning(error: &sqlx::Error) -> Option<Meaning> {
    let sqlx::Error::Database(e) = error else {
        return None;
    };
    if let Some(e) = e.try_downcast_ref::<MySqlDatabaseError>() {
        return match e.number() {
            code::ACCESS_DENIED => Some(Meaning::LoginRefused),
            code::DB_ACCESS_DENIED | code::BAD_DB => Some(Meaning::BadDatabase),
            code::DEADLOCK | code::LOCK_WAIT_TIMEOUT => Some(Meaning::Contention),
            _ => None,
        };
    }
    let e = e.try_downcast_ref::<PgDatabaseError>()?;
    match e.code() {
        sqlstate::INVALID_PASSWORD | sqlstate::INVALID_AUTHORIZATION => Some(Meaning::LoginRefused),
        sqlstate::INVALID_CATALOG => Some(Meaning::BadDatabase),
        sqlstate::DEADLOCK | sqlstate::SERIALIZATION | sqlstate::LOCK_NOT_AVAILABLE => {
            Some(Meaning::Contention)
        }
        _ => None,
    }
}
