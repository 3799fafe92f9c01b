//! Shared by the adapter's own tests: a real MariaDB server per test, clients on
//! it, and root access for what an operator would do.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_mysql::{MySqlConfig, MySqlLock, Strategy};
use distlock_testkit::servers::MariaDbServer;
use std::time::{Duration, Instant};

/// Starts a server of the test's own (a missing binary fails with the install
/// command, never skips).
pub async fn server() -> MariaDbServer {
    // Concurrent `mariadb-install-db` runs collide on temp tables in the shared
    // /tmp (the launcher passes no --tmpdir yet): start one server at a time.
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = STARTING.lock().await;
    match MariaDbServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start MariaDB for the test: {e}"),
    }
}

/// A connected client of `strategy` on `table`.
pub async fn client(server: &MariaDbServer, strategy: Strategy, table: &str) -> MySqlLock {
    MySqlConfig::from_url(&server.url())
        .expect("the launcher's URL parses")
        .strategy(strategy)
        .table(table)
        .connect()
        .await
        .expect("client connects")
}

/// Runs root SQL and returns the first field of the first row.
pub async fn root_value(server: &MariaDbServer, sql: &str) -> String {
    let out = server.exec_root(sql).await.expect("root SQL runs");
    out.lines()
        .next()
        .and_then(|line| line.split('\t').next_back())
        .unwrap_or_default()
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

/// The connection id of the session that blocks a waiter, on a server of the
/// test's own (InnoDB names a lock's holder only to its waiters).
pub async fn blocking_session(server: &MariaDbServer) -> u64 {
    let query = "SELECT b.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w \
         JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id;";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(id) = root_value(server, query).await.trim().parse() {
            return id;
        }
        assert!(Instant::now() < deadline, "nobody waits on a row lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
