//! Round trips per uncontended cycle, counted by the server (`Questions`, and
//! the writes among them), not timed. `version_cas` must cost 2 writes in
//! steady state, sent in 2 texts with its doorbell's 3 statements (the wait
//! with the CAS, the answer read back, the give-back with the release).
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Renewal};
use distlock_mysql::Strategy;
use distlock_testkit::servers::MariaDbServer;
use sqlx::{Connection, MySqlConnection, Row};
use support::{client, questions, server};

const CYCLES: u64 = 50;

/// Statements per acquire + release cycle on a warm client (row, connections and
/// prepared statements already there): every statement (`Questions`), and the
/// writes among them (`Com_insert` + `Com_update` + `Com_delete`).
async fn statements_per_cycle(server: &MariaDbServer, strategy: Strategy) -> (f64, f64) {
    let lock = client(server, strategy, strategy.as_str()).await;
    let key = LockKey::new("steady").unwrap();
    // Manual renewal: a renewal landing inside the window would be counted.
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    distlock_testkit::cycles(&*lock, &key, &opts, 3)
        .await
        .unwrap();
    let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
    let (before, writes_before) = (questions(&mut probe).await, writes(&mut probe).await);
    distlock_testkit::cycles(&*lock, &key, &opts, CYCLES as usize)
        .await
        .unwrap();
    let (after, writes_after) = (questions(&mut probe).await, writes(&mut probe).await);
    // The second SHOW counts itself, and the first `writes` read too.
    let all = (after - before - 2) as f64 / CYCLES as f64;
    (all, (writes_after - writes_before) as f64 / CYCLES as f64)
}

/// The server's count of writes: `Com_insert` + `Com_update` + `Com_delete`.
async fn writes(conn: &mut MySqlConnection) -> u64 {
    let rows = sqlx::query(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_insert', 'Com_update', 'Com_delete')",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    rows.iter()
        .map(|row| row.get::<String, _>(1).parse::<u64>().unwrap())
        .sum()
}

/// The doorbell's statements per cycle, beside the strategy's own, each
/// sent in a text with one of them: `version_cas` waits for the bell in a
/// `SELECT … INTO` and reads the answer back in a `SELECT` (with the CAS),
/// `unique_insert` waits in one `SELECT` of its own; both give the bell back
/// in a `DO` (with the release). Nothing runs in the background.
fn assert_doorbell_statements(all: f64, writes: f64, doorbell: f64) {
    assert_eq!(
        all - writes,
        doorbell,
        "doorbell statements per cycle ({all} in all)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn version_cas_costs_two_statements_per_uncontended_cycle() {
    let server = server().await;
    let (all, writes) = statements_per_cycle(&server, Strategy::VersionCas).await;
    assert_eq!(writes, 2.0, "CAS UPDATE + release UPDATE");
    assert_doorbell_statements(all, writes, 3.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_and_for_update_cost_three_statements_per_cycle() {
    let server = server().await;
    let (all, writes) = statements_per_cycle(&server, Strategy::UniqueInsert).await;
    assert_eq!(writes, 3.0, "INSERT + counter bump + DELETE");
    assert_doorbell_statements(all, writes, 2.0);
    let (for_update, _) = statements_per_cycle(&server, Strategy::ForUpdate).await;
    assert_eq!(
        for_update, 3.0,
        "SELECT … FOR UPDATE + counter bump + COMMIT, and no doorbell"
    );
}

/// Statements per benchmark floor (`Inspect::floor_cycle`, the strategy's
/// statements and its doorbell's with nothing around them), and `Inspect::server_requests`
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
        (Strategy::VersionCas, 5_u32),
        (Strategy::UniqueInsert, 5),
        (Strategy::ForUpdate, 3),
    ] {
        let (per_floor, counted) = statements_per_floor(&server, strategy).await;
        assert_eq!(per_floor, f64::from(statements), "{strategy:?}");
        // The floors, and the second reading's own SHOW.
        assert_eq!(counted, u64::from(statements) * CYCLES + 1, "{strategy:?}");
    }
}
