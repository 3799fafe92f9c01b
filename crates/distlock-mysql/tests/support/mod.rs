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

/// The connection id of the session holding a row lock that a waiter is blocked
/// on, on a server of the test's own.
///
/// InnoDB's lock-wait tables are not enough: a `SELECT … FOR UPDATE` on a unique
/// key reads (and waits for) the row while the optimizer runs, and during that
/// wait its transaction is listed nowhere. So: wait until a locking read is in
/// flight, then take the one running transaction that holds row locks.
pub async fn blocking_session(server: &MariaDbServer) -> u64 {
    let waiting = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE command = 'Execute' AND info LIKE '%FOR UPDATE%';";
    let holders = "SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX \
         WHERE trx_state = 'RUNNING' AND trx_rows_locked > 0;";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if root_value(server, waiting).await != "0" {
            let found = server.exec_root(holders).await.expect("root SQL runs");
            let ids: Vec<u64> = found
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if let [id] = ids[..] {
                return id;
            }
        }
        if Instant::now() >= deadline {
            let sessions = server
                .exec_root(
                    "SELECT id, command, time, state, info FROM information_schema.PROCESSLIST;",
                )
                .await
                .unwrap_or_default();
            let trx = server
                .exec_root("SELECT trx_mysql_thread_id, trx_state, trx_rows_locked FROM information_schema.INNODB_TRX;")
                .await
                .unwrap_or_default();
            panic!(
                "no single lock holder with a waiter\nsessions:\n{sessions}\ntransactions:\n{trx}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
