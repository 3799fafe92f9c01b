//! Many clients of a new table connecting at once, as a fleet does on its first
//! deploy: every `connect` succeeds although each creates the tables it needs.
//! PostgreSQL's `CREATE TABLE IF NOT EXISTS` checks the name, then creates the
//! table's row type and the table; a racing creator fails on one of those
//! (`type "…" already exists`, a unique violation on the catalog, or the table
//! itself) although the table is there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_postgres::{PostgresConfig, Strategy};

const CLIENTS: usize = 16;
const ROUNDS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_connects_all_succeed() {
    let server = support::server().await;
    for strategy in [Strategy::VersionCas, Strategy::Advisory] {
        for round in 0..ROUNDS {
            // A new table each round: every client finds it missing.
            let table = format!("race_{}_{round}", strategy.as_str());
            let mut connects = Vec::new();
            for _ in 0..CLIENTS {
                let config = PostgresConfig::from_url(&server.url())
                    .unwrap()
                    .strategy(strategy)
                    .table(table.clone());
                connects.push(tokio::spawn(
                    async move { config.connect().await.map(drop) },
                ));
            }
            for connect in connects {
                if let Err(e) = connect.await.unwrap() {
                    panic!("{table}: a concurrent first connect failed: {e}");
                }
            }
        }
    }
}
