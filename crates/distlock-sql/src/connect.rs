//! [`connect`]: one MySQL connection from a URL, for callers without a pool
//! of their own.

use crate::db::Steps;
use crate::error::{BACKEND, map_error_at};
use distlock_core::LockError;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, MySql};
use std::str::FromStr;
use std::time::Duration;

/// How long [`connect`] waits for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to `url` (`mysql://user:password@host:port/database`),
/// waiting at most [`CONNECT_TIMEOUT`], with errors mapped as by [`map_error`](crate::map_error)
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
    let endpoint = MySql::endpoint(&options);
    match tokio::time::timeout(CONNECT_TIMEOUT, MySqlConnection::connect_with(&options)).await {
        Ok(connected) => connected.map_err(|e| map_error_at(e, &endpoint, BACKEND)),
        Err(_) => Err(LockError::Unavailable {
            backend: BACKEND,
            endpoint,
            source: format!("no connection within {CONNECT_TIMEOUT:?}").into(),
        }),
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
        assert_eq!(MySql::endpoint(&options), "mysql://db.example:3307/app");
        assert!(!crate::is_contention(&LockError::config(BACKEND, "x")));
    }
}
