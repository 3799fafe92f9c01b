//! Turning sqlx errors into [`LockError`]s: connection trouble is
//! [`LockError::Unavailable`], a login or database the server refuses is
//! [`LockError::Config`], anything else the server says is [`LockError::Backend`].
//! No message ever carries a password: endpoints are rebuilt from host, port
//! and database only.

use distlock_core::LockError;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError};
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;
use std::time::Duration;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "mysql";

/// The endpoint named when a statement on the caller's own connection fails:
/// the crate never sees that connection's URL.
const CALLER_CONNECTION: &str = "the caller's connection";

/// How long [`connect`] waits for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
/// I/O failures become [`LockError::Unavailable`]; a deadlock (1213) or a lock
/// wait timeout (1205) becomes a transient [`LockError::Backend`] for which
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
    map_error_at(error, CALLER_CONNECTION)
}

/// [`map_error`] naming `endpoint` (never with credentials).
pub(crate) fn map_error_at(error: sqlx::Error, endpoint: &str) -> LockError {
    let config = |reason: String| LockError::config(BACKEND, reason);
    match server_code(&error) {
        Some(code::ACCESS_DENIED) => {
            return config(format!(
                "the server at {endpoint} refused the login ({error}); check the user and password"
            ));
        }
        Some(code::DB_ACCESS_DENIED | code::BAD_DB) => {
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
            backend: BACKEND,
            endpoint: endpoint.to_owned(),
            source: Box::new(e),
        },
        other => LockError::backend(BACKEND, other),
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
    source
        .downcast_ref::<sqlx::Error>()
        .and_then(server_code)
        .is_some_and(|code| matches!(code, code::DEADLOCK | code::LOCK_WAIT_TIMEOUT))
}

/// The server's error number, for errors the server sent.
fn server_code(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(e) => e
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// Opens one connection to `url` (`mysql://user:password@host:port/database`),
/// waiting at most [`CONNECT_TIMEOUT`], with errors mapped as by [`map_error`]
/// and naming the server without credentials: a server that cannot be reached
/// is [`LockError::Unavailable`], a bad URL or refused login is
/// [`LockError::Config`].
///
/// Connections from your own `sqlx` pool work just as well with
/// [`crate::SqlFence`]; this is a convenience.
///
/// ```no_run
/// # async fn run() -> Result<(), distlock_core::LockError> {
/// let mut conn = distlock_sql::connect("mysql://app:secret@127.0.0.1:3306/app").await?;
/// distlock_sql::SqlFence::new().create_table(&mut conn).await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<MySqlConnection, LockError> {
    let options = MySqlConnectOptions::from_str(url)
        .map_err(|e| LockError::config(BACKEND, format!("the URL does not parse: {e}")))?;
    let options = options.disable_statement_logging();
    let endpoint = endpoint(&options);
    match tokio::time::timeout(CONNECT_TIMEOUT, MySqlConnection::connect_with(&options)).await {
        Ok(connected) => connected.map_err(|e| map_error_at(e, &endpoint)),
        Err(_) => Err(LockError::Unavailable {
            backend: BACKEND,
            endpoint,
            source: format!("no connection within {CONNECT_TIMEOUT:?}").into(),
        }),
    }
}

/// The server address, without credentials, for messages.
pub(crate) fn endpoint(options: &MySqlConnectOptions) -> String {
    if let Some(socket) = options.get_socket() {
        return format!("mysql://{}", socket.display());
    }
    let (host, port) = (options.get_host(), options.get_port());
    let database = options.get_database().unwrap_or("");
    match host.contains(':') {
        true => format!("mysql://[{host}]:{port}/{database}"),
        false => format!("mysql://{host}:{port}/{database}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_urls_are_config_errors_without_the_password() {
        let err = connect("mysql://u:hunter2@127.0.0.1:notaport/db")
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err:?}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    }

    #[test]
    fn endpoints_carry_no_credentials() {
        let options =
            MySqlConnectOptions::from_str("mysql://u:hunter2@db.example:3307/app").unwrap();
        assert_eq!(endpoint(&options), "mysql://db.example:3307/app");
        assert!(!is_contention(&LockError::config(BACKEND, "x")));
    }
}
