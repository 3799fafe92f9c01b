//! Round trips per uncontended cycle, counted by the server
//! (`pg_stat_statements`' calls, which the launcher preloads), not timed. Both
//! strategies must cost 2 statements per cycle in steady state.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Renewal};
use distlock_postgres::Strategy;
use distlock_testkit::servers::PostgresServer;
use support::{admin_value, client, server};

const CYCLES: u64 = 50;

/// Statements the server ran so far; each reading counts itself once it ends.
async fn statements(server: &PostgresServer) -> u64 {
    admin_value(server, "SELECT sum(calls) FROM pg_stat_statements;")
        .await
        .parse()
        .unwrap()
}

/// Statements per acquire + release cycle on a warm client (row, connections and
/// prepared statements already there).
async fn statements_per_cycle(server: &PostgresServer, strategy: Strategy) -> f64 {
    let table = format!("trips_{}", strategy.as_str());
    let lock = client(server, strategy, &table).await;
    let key = LockKey::new("steady").unwrap();
    // Manual renewal: a renewal landing inside the window would be counted.
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    distlock_testkit::cycles(&*lock, &key, &opts, 3)
        .await
        .unwrap();
    let before = statements(server).await;
    distlock_testkit::cycles(&*lock, &key, &opts, CYCLES as usize)
        .await
        .unwrap();
    let after = statements(server).await;
    // The first reading is counted in the second.
    (after - before - 1) as f64 / CYCLES as f64
}

#[tokio::test(flavor = "multi_thread")]
async fn both_strategies_cost_two_statements_per_uncontended_cycle() {
    let server = server().await;
    let cas = statements_per_cycle(&server, Strategy::VersionCas).await;
    assert_eq!(
        cas, 2.0,
        "CAS UPDATE … RETURNING + release UPDATE, NOTIFY if marked"
    );
    let advisory = statements_per_cycle(&server, Strategy::Advisory).await;
    assert_eq!(advisory, 2.0, "try-lock with counter bump + unlock");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_floor_is_the_same_two_statements_and_server_requests_counts_them() {
    let server = server().await;
    for strategy in [Strategy::VersionCas, Strategy::Advisory] {
        let table = format!("floor_{}", strategy.as_str());
        let lock = client(&server, strategy, &table).await;
        let inspect = lock.inspect().unwrap();
        let key = LockKey::new("floor").unwrap();
        let ttl = std::time::Duration::from_secs(30);
        for _ in 0..3 {
            inspect.floor_cycle(&key, ttl).await.unwrap();
        }
        let before = statements(&server).await;
        let counted_before = inspect.server_requests().await.unwrap().unwrap();
        for _ in 0..CYCLES {
            inspect.floor_cycle(&key, ttl).await.unwrap();
        }
        let counted_after = inspect.server_requests().await.unwrap().unwrap();
        let after = statements(&server).await;
        // Between the probe's readings: the first reading itself, and the
        // counter's two readings of two statements each (the view check, the sum).
        let per_floor = (after - before - 1 - 4) as f64 / CYCLES as f64;
        assert_eq!(per_floor, 2.0, "{strategy:?}");
        // The floors, and the first reading's own two statements.
        assert_eq!(
            counted_after - counted_before,
            2 * CYCLES + 2,
            "{strategy:?}"
        );
    }
}
