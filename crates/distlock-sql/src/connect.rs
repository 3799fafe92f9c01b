//! [`connect`]: one MySQL connection from a URL, for callers without a pool
//! of their own. MySQL only: its return type is a `MySqlConnection`; on
//! PostgreSQL, open a `sqlx::PgConnection` (or use [`crate::SqlStore`]).

use crate::db::{SqlDatabase, Steps};
use crate::error::map_error_at;
use distlock_core::LockError;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, MySql};
use std::str::FromStr;
use std::time::Duration;

const BACKEND: &str = MySql::BACKEND;

/// How long [`connect`] waits for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to `url` (`mysql://user:password@host:port/database`),
/// waiting at most [`CONNECT_TIMEOUT`], with errors mapped as by [`map_error`](crate::map_error)
/// and naming the server without credentials: a server that cannot be reached
/// is [`LockError::Unavailable`], a bad URL or refused login is
/// [`LockError::Config`].
///
/// Connections from your own `sqlx` pool work just as well with
/// [`crate::SqlFence`]; this is a convenience, for MySQL and MariaDB only: a
/// `postgres://` URL is refused with a [`LockError::Config`] saying so.
///
/// ```no_run
/// # async fn run() -> Result<(), distlock_core::LockError> {
/// let mut conn = distlock_sql::connect("mysql://app:secret@127.0.0.1:3306/app").await?;
/// distlock_sql::SqlFence::new().create_table(&mut conn).await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<MySqlConnection, LockError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Err(LockError::config(
            BACKEND,
            "distlock_sql::connect opens MySQL connections only; on PostgreSQL open a \
             sqlx::PgConnection (PgConnection::connect) and pass it to SqlFence",
        ));
    }
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
        let postgres = connect("postgres://u:hunter2@127.0.0.1/db").await;
        let refused = postgres.unwrap_err().to_string();
        assert!(refused.contains("MySQL connections only"), "{refused}");
        assert!(!refused.contains("hunter2"), "{refused}");
    }

    #[test]
    fn endpoints_carry_no_credentials() {
        let options =
            MySqlConnectOptions::from_str("mysql://u:hunter2@db.example:3307/app").unwrap();
        assert_eq!(MySql::endpoint(&options), "mysql://db.example:3307/app");
        assert!(!crate::is_contention(&LockError::config(BACKEND, "x")));
    }
}
