//! Shared by the crate's integration tests: one real MariaDB server per test
//! binary, connections to it, and root access to look behind the crate's back.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use distlock_testkit::servers::MariaDbServer;
pub use distlock_testkit::support::eventually;
use sqlx::MySqlConnection;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The binary's server, started by the first test that asks (a missing binary
/// fails with the install command, never skips). The testkit's watchdog stops
/// it when the test process exits.
pub async fn server() -> &'static MariaDbServer {
    static SERVER: OnceCell<MariaDbServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            match MariaDbServer::start().await {
                Ok(server) => server,
                Err(e) => panic!("cannot start MariaDB for the test: {e}"),
            }
        })
        .await
}

/// A new connection as the test user.
pub async fn connect() -> MySqlConnection {
    distlock_sql::connect(&server().await.url())
        .await
        .expect("the test user connects")
}

/// Runs statements as the test user on a fresh connection (setup DDL).
pub async fn exec(sql: &str) {
    let mut conn = connect().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("setup SQL failed: {e}\n{sql}"));
}

/// Runs root SQL and returns the first field of the first row.
pub async fn root_value(sql: &str) -> String {
    let out = server().await.exec_root(sql).await.expect("root SQL runs");
    out.lines()
        .next()
        .and_then(|line| line.split('\t').next())
        .unwrap_or_default()
        .to_owned()
}

/// The first column of the first row of `sql`, read as the test user on a
/// fresh connection (so: the latest committed data). `None` when no row.
pub async fn value<T>(sql: &str) -> Option<T>
where
    T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql> + Send + Unpin,
{
    let mut conn = connect().await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_optional(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("query failed: {e}\n{sql}"))
}

/// How many sessions are running a statement whose text starts with `prefix`
/// (read live from `PROCESSLIST`).
pub async fn sessions_running(prefix: &str) -> usize {
    let pattern = prefix
        .replace('|', "||")
        .replace('%', "|%")
        .replace('_', "|_");
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE '{pattern}%' ESCAPE '|';"
    );
    root_value(&sql).await.parse().expect("a count")
}
