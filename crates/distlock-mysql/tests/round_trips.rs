//! Round trips per uncontended cycle, counted by the server (`Questions`), not
//! timed. `version_cas` must cost 2 statements in steady state.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Renewal};
use distlock_mysql::Strategy;
use distlock_testkit::servers::MariaDbServer;
use sqlx::{Connection, MySqlConnection};
use support::{client, questions, server};

const CYCLES: u64 = 50;

/// Statements per acquire + release cycle on a warm client (row, connections and
/// prepared statements already there).
async fn statements_per_cycle(server: &MariaDbServer, strategy: Strategy) -> f64 {
    let lock = client(server, strategy, strategy.as_str()).await;
    let key = LockKey::new("steady").unwrap();
    // Manual renewal: a renewal landing inside the window would be counted.
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    distlock_testkit::cycles(&*lock, &key, &opts, 3)
        .await
        .unwrap();
    let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
    let before = questions(&mut probe).await;
    distlock_testkit::cycles(&*lock, &key, &opts, CYCLES as usize)
        .await
        .unwrap();
    let after = questions(&mut probe).await;
    // The second SHOW counts itself.
    (after - before - 1) as f64 / CYCLES as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn version_cas_costs_two_statements_per_uncontended_cycle() {
    let server = server().await;
    let per_cycle = statements_per_cycle(&server, Strategy::VersionCas).await;
    assert_eq!(per_cycle, 2.0, "CAS UPDATE + release UPDATE");
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_and_for_update_cost_three_statements_per_cycle() {
    let server = server().await;
    let unique = statements_per_cycle(&server, Strategy::UniqueInsert).await;
    assert_eq!(unique, 3.0, "INSERT + counter bump + DELETE");
    let for_update = statements_per_cycle(&server, Strategy::ForUpdate).await;
    assert_eq!(
        for_update, 3.0,
        "SELECT … FOR UPDATE + counter bump + COMMIT"
    );
}

/// Statements per benchmark floor (`Inspect::floor_cycle`, the strategy's
/// statements with nothing around them), and `Inspect::server_requests`
/// reading the same `Questions`.
async fn statements_per_floor(server: &MariaDbServer, strategy: Strategy) -> (f64, u64) {
    let table = format!("floor_{}", strategy.as_str());
    let lock = client(server, strategy, &table).await;
    let inspect = lock.inspect().unwrap();
    let key = LockKey::new("floor").unwrap();
    let ttl = std::time::Duration::from_secs(30);
    // Warm-up: the row, the connections, the prepared statements.
    for _ in 0..3 {
        inspect.floor_cycle(&key, ttl).await.unwrap();
    }
    let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
    let before = questions(&mut probe).await;
    let counted_before = inspect.server_requests().await.unwrap().unwrap();
    for _ in 0..CYCLES {
        inspect.floor_cycle(&key, ttl).await.unwrap();
    }
    let counted_after = inspect.server_requests().await.unwrap().unwrap();
    let after = questions(&mut probe).await;
    // The counter's two readings are between the probe's, and so is its second.
    let per_floor = (after - before - 3) as f64 / CYCLES as f64;
    (per_floor, counted_after - counted_before)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_strategys_floor_is_its_own_statements_and_server_requests_counts_them() {
    let server = server().await;
    for (strategy, statements) in [
        (Strategy::VersionCas, 2_u32),
        (Strategy::UniqueInsert, 3),
        (Strategy::ForUpdate, 3),
    ] {
        let (per_floor, counted) = statements_per_floor(&server, strategy).await;
        assert_eq!(per_floor, f64::from(statements), "{strategy:?}");
        // The floors, and the second reading's own SHOW.
        assert_eq!(counted, u64::from(statements) * CYCLES + 1, "{strategy:?}");
    }
}
