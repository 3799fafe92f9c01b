//! Shared by the adapter's own tests: a real PostgreSQL server per test, clients
//! on it, and superuser access for what an operator would do.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use distlock_core::DynLock;
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::PostgresServer;
use distlock_testkit::state_rows::Operator;
pub use distlock_testkit::support::eventually;
use distlock_testkit::support::start_server;

/// Starts a server of the test's own (a missing binary fails with the install
/// command, never skips).
pub async fn server() -> PostgresServer {
    start_server("PostgreSQL", PostgresServer::start()).await
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
    server.value(sql).await.expect("superuser SQL runs")
}
