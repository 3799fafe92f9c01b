//! Many clients creating the fence tables of one PostgreSQL database at once,
//! as a fleet does on its first deploy: every `connect_to` succeeds.
//! PostgreSQL's `CREATE TABLE IF NOT EXISTS` checks the name, then creates the
//! table's row type and the table; a racing creator fails on one of those
//! (`type "…" already exists`, a unique violation on the catalog, or the
//! table itself) although the table is there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::toolkit::Timeouts;
use distlock_sql::SqlStore;
use distlock_testkit::servers::PostgresServer;
use std::time::Duration;

const CLIENTS: usize = 16;
const ROUNDS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_connects_all_succeed() {
    let server = PostgresServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL for the test: {e}"));
    let timeouts = Timeouts::new(Duration::from_secs(10), Duration::from_secs(10));
    for round in 0..ROUNDS {
        let mut connects = Vec::new();
        for _ in 0..CLIENTS {
            let options = server.url().parse().expect("the launcher's URL parses");
            connects.push(tokio::spawn(SqlStore::<sqlx::Postgres>::connect_to(
                options, timeouts,
            )));
        }
        for connect in connects {
            if let Err(e) = connect.await.unwrap() {
                panic!("round {round}: a concurrent first connect failed: {e}");
            }
        }
        // Gone again, so that the next round races on missing tables too.
        let drop = format!(
            "DROP TABLE distlock_fences, {};",
            SqlStore::<sqlx::Postgres>::VALUES_TABLE
        );
        server.exec_admin(&drop).await.unwrap();
    }
}
