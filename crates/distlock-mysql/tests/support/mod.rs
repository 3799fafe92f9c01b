//! Shared by the adapter's own tests: a real MariaDB server per test, clients on
//! it, and root access for what an operator would do.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use distlock_core::DynLock;
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::servers::MariaDbServer;
pub use distlock_testkit::support::eventually;
use distlock_testkit::support::start_server;
use sqlx::{MySqlConnection, Row};

/// Starts a server of the test's own (a missing binary fails with the install
/// command, never skips).
pub async fn server() -> MariaDbServer {
    start_server("MariaDB", MariaDbServer::start()).await
}

/// A connected client of `strategy` on `table`.
pub async fn client(server: &MariaDbServer, strategy: Strategy, table: &str) -> DynLock {
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

/// How many sessions are running a `for_update` locking statement on `table`
/// now, that is, are queued on one of its row locks: read live from
/// `PROCESSLIST`, never from InnoDB's cached lock tables.
pub async fn queued_sessions(server: &MariaDbServer, table: &str) -> usize {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE 'UPDATE `{}` SET owner = CONNECTION|_ID(), holder = % WHERE name = %' ESCAPE '|';",
        table.replace('_', "|_")
    );
    root_value(server, &sql).await.parse().expect("a count")
}

/// The connection id of the session holding `key`'s row lock in a `for_update`
/// table: what the holder's locking `UPDATE` wrote into `owner`, uncommitted
/// (so read uncommitted). Panics when no holder is recorded.
pub async fn holder_session(server: &MariaDbServer, table: &str, key: &str) -> u64 {
    let sql = format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; \
         SELECT owner FROM distlock.`{table}` WHERE name = '{key}';"
    );
    let owner = root_value(server, &sql).await;
    owner
        .parse()
        .unwrap_or_else(|_| panic!("no holder session recorded for {key}: {owner:?}"))
}

/// Whether any transaction holds `key`'s row lock in `table`: a locking read
/// that skips locked rows does not see it.
pub async fn row_locked(server: &MariaDbServer, table: &str, key: &str) -> bool {
    let sql = format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
         SELECT COUNT(*) FROM distlock.`{table}` WHERE name = '{key}' FOR UPDATE SKIP LOCKED;"
    );
    root_value(server, &sql).await == "0"
}

/// `Questions` (the server's statement count) as seen from a plain
/// connection; each read costs one statement.
pub async fn questions(conn: &mut MySqlConnection) -> u64 {
    let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Questions'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    row.get::<String, _>(1).parse().unwrap()
}
