//! Shared by the adapter's own tests: a real PostgreSQL server per test, clients
//! on it, and superuser access for what an operator would do.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::DynLock;
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;
use std::time::{Duration, Instant};

/// Starts a server of the test's own (a missing binary fails with the install
/// command, never skips).
pub async fn server() -> PostgresServer {
    // One initdb at a time: each is seconds of CPU and disk on a shared machine.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = STARTING.lock().await;
    match PostgresServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start PostgreSQL for the test: {e}"),
    }
}

/// A connected client of `strategy` on `table`.
pub async fn client(server: &PostgresServer, strategy: Strategy, table: &str) -> DynLock {
    PostgresConfig::from_url(&server.url())
        .expect("the launcher's URL parses")
        .strategy(strategy)
        .table(table)
        .connect()
        .await
        .expect("client connects")
}

/// Runs superuser SQL and returns the first field of the first row.
pub async fn admin_value(server: &PostgresServer, sql: &str) -> String {
    let out = server.exec_admin(sql).await.expect("superuser SQL runs");
    out.lines()
        .next()
        .and_then(|line| line.split('|').next())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Polls `condition` every 20 ms until it holds, failing after `limit`.
pub async fn eventually<F: AsyncFnMut() -> bool>(limit: Duration, what: &str, mut condition: F) {
    let deadline = Instant::now() + limit;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not true within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
