//! Round trips per uncontended cycle, counted by the server
//! (`pg_stat_statements`' calls, which the launcher preloads), not timed. Both
//! strategies must cost 2 statements per cycle in steady state, a won
//! acquire must read its own row only (the scans in the plan the server ran)
//! and plan no other on `advisory`, and `version_cas` must update its row in place (the server's statistics).
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Renewal};
use distlock_postgres::Strategy;
use distlock_testkit::servers::PostgresServer;
use std::time::{Duration, Instant};
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

/// The scans of `table` that ran when `statement` (its `{table}` filled in)
/// ran once with `args`, by the plan the server executed (`EXPLAIN ANALYZE`,
/// as the superuser; advisory locks it took are given back).
/// With `planned`, also those it set up and never ran: a scan the server
/// sets up costs its time even when it never runs it.
async fn scans(
    server: &PostgresServer,
    table: &str,
    statement: &str,
    args: &str,
    planned: bool,
) -> usize {
    let statement = statement.replace("{table}", table);
    let plan = server
        .exec_admin(&format!(
            "PREPARE probe AS {statement};
             EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE probe({args});
             SELECT pg_advisory_unlock_all();"
        ))
        .await
        .unwrap();
    let on_table = format!(" on {table}");
    plan.lines()
        .filter(|line| line.contains("Scan") && line.contains(&on_table))
        .filter(|line| planned || !line.contains("never executed"))
        .count()
}

/// A won acquire reads its own row and no other: `advisory`'s acquire and
/// `lock_in`'s bump do not even plan another scan, the bump that checks that
/// no other name has the row's advisory key (sent only for a row that does
/// not record its key) reads no other row while the row records it, and the
/// holder's time left (`version_cas`) is read only when the CAS lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_won_acquire_reads_only_its_own_row() {
    let server = server().await;
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    let key = LockKey::new("steady").unwrap();
    for strategy in [Strategy::Advisory, Strategy::VersionCas] {
        let table = format!("plan_{}", strategy.as_str());
        let lock = client(&server, strategy, &table).await;
        distlock_testkit::cycles(&*lock, &key, &opts, 1)
            .await
            .unwrap();
    }
    let lock_key = admin_value(
        &server,
        "SELECT lock_key FROM plan_advisory WHERE name = 'steady';",
    )
    .await;
    let acquire = include_str!("../src/sql/advisory_acquire.sql");
    let args = format!("'distlock', 'steady', {lock_key}, '60000', 'probe', NULL");
    assert_eq!(
        scans(&server, "plan_advisory", acquire, &args, true).await,
        1,
        "advisory"
    );
    let args = format!("'distlock', 'steady', {lock_key}, 'probe'");
    let bump = include_str!("../src/sql/counter_bump.sql");
    assert_eq!(
        scans(&server, "plan_advisory", bump, &args, true).await,
        1,
        "lock_in"
    );
    let checked = include_str!("../src/sql/tx_bump.sql");
    assert_eq!(
        scans(&server, "plan_advisory", checked, &args, false).await,
        1,
        "the bump that checks the key"
    );
    let cas = include_str!("../../distlock-sql/src/sql/postgres/cas_acquire.sql");
    let args = "'probe', 'probe', 1, 'distlock', 'steady'";
    assert_eq!(
        scans(&server, "plan_version_cas", cas, args, false).await,
        1,
        "version_cas"
    );
}

/// Row updates the server counted on `table`, and how many of them were in
/// place (HOT). A session sends its counts at most once a second while
/// busy, within 10 s once idle, and when it ends.
async fn updates(server: &PostgresServer, table: &str) -> (u64, u64) {
    let sql = format!(
        "SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = '{table}';"
    );
    let both = admin_value(server, &sql).await;
    let (all, hot) = both.split_once(' ').unwrap();
    (all.parse().unwrap(), hot.parse().unwrap())
}

/// A `version_cas` acquire and release update the row in place (HOT): no
/// index holds a column they change. The index that finds idle rows is on
/// `used_at`, which an acquire moves at most once a second; earlier
/// releases indexed `expires_at`, which both change, so every update wrote
/// the row anew and an entry in each of the table's three indexes.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_cas_cycle_updates_its_row_in_place() {
    // Few enough that every version of the row fits in its page unpruned.
    const HOT_CYCLES: u64 = 10;
    let server = server().await;
    let table = "hot_version_cas";
    let lock = client(&server, Strategy::VersionCas, table).await;
    let key = LockKey::new("steady").unwrap();
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    distlock_testkit::cycles(&*lock, &key, &opts, 1)
        .await
        .unwrap();
    let counted = async || updates(&server, table).await.0 >= 2;
    distlock_testkit::support::eventually(
        Duration::from_secs(30),
        "the first cycle's updates",
        counted,
    )
    .await;
    let before = updates(&server, table).await;
    let started = Instant::now();
    distlock_testkit::cycles(&*lock, &key, &opts, HOT_CYCLES as usize)
        .await
        .unwrap();
    let seconds = started.elapsed().as_secs();
    drop(lock);
    let counted = async || updates(&server, table).await.0 >= before.0 + 2 * HOT_CYCLES;
    distlock_testkit::support::eventually(Duration::from_secs(30), "the cycles' updates", counted)
        .await;
    let after = updates(&server, table).await;
    let (all, hot) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(all, 2 * HOT_CYCLES, "an acquire and a release a cycle");
    assert!(
        all - hot <= 1 + seconds,
        "{hot} of {all} updates in place over {seconds} s: only a used_at stamp a second may not be"
    );
}
