//! Bounded state of `version_cas` and `advisory`: rows of names idle for
//! `state_ttl` are deleted by later acquires, a bounded number each, never
//! the counter of a name held, and a name used again afterwards gets tokens
//! above all its earlier ones, even when the server clock is now below them.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, HolderMeta, LockKey};
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::servers::{MovableClock, PostgresServer};
use distlock_testkit::state_rows::{
    RowDatabase, SqlRows, a_held_name_keeps_its_counter,
    collected_name_rises_after_the_clock_steps_back, collected_names_rise_above_a_clock_behind,
    missing_column_is_named_then_used, use_once,
};
use std::time::Duration;
use support::{admin_value, server};

const STATE_TTL: Duration = Duration::from_secs(2);

async fn client(server: &PostgresServer) -> DynLock {
    client_of(server, Strategy::VersionCas).await
}

async fn client_of(server: &PostgresServer, strategy: Strategy) -> DynLock {
    PostgresConfig::from_url(&server.url())
        .unwrap()
        .strategy(strategy)
        .state_ttl(STATE_TTL)
        .connect()
        .await
        .unwrap()
}

/// The lock table `table` of `server`, as the scenarios read and change it.
fn rows<'a>(server: &'a PostgresServer, table: &str) -> SqlRows<'a> {
    SqlRows {
        operator: server,
        table: table.to_owned(),
        fence_rows: "name = '{name}'",
        clock: "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT;",
        per_name: 1,
    }
}

/// Idle rows are collected by new names' acquires, and tokens rise above a
/// collected name's earlier ones although those are far ahead of the server
/// clock (as if it had stepped back since).
#[tokio::test(flavor = "multi_thread")]
async fn idle_rows_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client(&server).await;
    collected_names_rise_above_a_clock_behind(&lock, &rows(&server, "distlock_locks"), STATE_TTL)
        .await
        .unwrap();
}

/// A name collected and then used again after the server clock stepped back
/// an hour gets a token above its earlier ones, on both strategies.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_after_a_collection_even_when_the_server_clock_steps_back() {
    let clock = MovableClock::new().expect("cc builds the clock shim");
    let server = PostgresServer::start_with_clock(&clock).await.unwrap();
    for (strategy, table) in [
        (Strategy::VersionCas, "distlock_locks"),
        (Strategy::Advisory, "distlock_advisory"),
    ] {
        clock.set_back(Duration::ZERO).unwrap();
        let lock = client_of(&server, strategy).await;
        let step_back = || Ok(clock.set_back(Duration::from_secs(3600))?);
        collected_name_rises_after_the_clock_steps_back(
            &lock,
            &rows(&server, table),
            STATE_TTL,
            step_back,
        )
        .await
        .unwrap_or_else(|e| panic!("{strategy:?}: {e}"));
    }
}

/// A `version_cas` row's `used_at` ahead of the server clock (as after the
/// clock stepped back) moves back to it at the name's next acquire: left
/// ahead, it would keep the idle row out of the collection's search until
/// the clock caught up.
#[tokio::test(flavor = "multi_thread")]
async fn a_used_at_ahead_of_the_clock_moves_back_at_the_next_acquire() {
    let server = server().await;
    let lock = client(&server).await;
    use_once(&lock, "jobs/ahead").await.unwrap();
    let ahead = "UPDATE distlock_locks SET used_at = now() + interval '1 hour' \
                 WHERE name = 'jobs/ahead';";
    server.exec_admin(ahead).await.unwrap();
    use_once(&lock, "jobs/ahead").await.unwrap();
    let behind = "SELECT (used_at <= now())::INT FROM distlock_locks WHERE name = 'jobs/ahead';";
    assert_eq!(
        admin_value(&server, behind).await,
        "1",
        "the stamp stayed ahead"
    );
}

/// The same for `advisory`'s counter rows.
#[tokio::test(flavor = "multi_thread")]
async fn idle_advisory_counters_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client_of(&server, Strategy::Advisory).await;
    let rows = rows(&server, "distlock_advisory");
    collected_names_rise_above_a_clock_behind(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// An `advisory` name held for longer than `state_ttl` keeps its counter
/// while new names collect idle ones.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_advisory_name_keeps_its_counter() {
    let server = server().await;
    let lock = client_of(&server, Strategy::Advisory).await;
    let rows = rows(&server, "distlock_advisory");
    a_held_name_keeps_its_counter(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// An `advisory` bump keeps a stamp at or after its own instant and moves an
/// older one to that instant plus a second: the stamp is never before the
/// name's last use, at most a second after it, and the same for every bump
/// within that second. A stamp moved at every bump is a change of an indexed
/// column, so no bump could update the row in place.
#[tokio::test(flavor = "multi_thread")]
async fn an_advisory_bump_stamps_its_name_once_a_second() {
    const SECOND: i64 = 1_000_000;
    let server = server().await;
    let lock = client_of(&server, Strategy::Advisory).await;
    let key = LockKey::new("jobs/stamped").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    // Server time in µs, and the name's stamp.
    let micros = async |sql: &str| -> i64 {
        let sql = format!("SELECT (EXTRACT(EPOCH FROM {sql}) * 1000000)::BIGINT;");
        admin_value(&server, &sql).await.parse().unwrap()
    };
    let stamp = async || {
        micros("(SELECT expires_at FROM distlock_advisory WHERE name = 'jobs/stamped')").await
    };
    let before = micros("now()").await;
    distlock_testkit::cycles(&*lock, &key, &opts, 1)
        .await
        .unwrap();
    let (first, after) = (stamp().await, micros("now()").await);
    assert!(
        (before + SECOND..=after + SECOND).contains(&first),
        "the first bump stamps its instant plus a second: {first} not in {before}..{after} + 1 s"
    );
    distlock_testkit::cycles(&*lock, &key, &opts, 1)
        .await
        .unwrap();
    let (second, at) = (stamp().await, micros("now()").await);
    if at < first {
        assert_eq!(second, first, "a bump within the second keeps the stamp");
    } else {
        // The machine stalled for a second between the two bumps.
        assert!(
            second > first && second <= at + SECOND,
            "a later bump moves the stamp: {second} after {first}, at most {at} + 1 s"
        );
    }
}

/// Rows an earlier release left (no expiry stamp) are collected too, and the
/// schema changes (bounded state, the `holder` column) apply to a table that
/// release created.
#[tokio::test(flavor = "multi_thread")]
async fn rows_of_the_previous_release_are_collected() {
    let server = server().await;
    server
        .exec_admin(&format!(
            "{} INSERT INTO distlock_locks (namespace, name, fence) \
             VALUES ('distlock', 'old/1', 5), ('distlock', 'old/2', 7);",
            old_table("version_cas")
        ))
        .await
        .unwrap();
    // The index on `expires_at` bounded state added before `used_at`.
    let expiry_index = "CREATE INDEX distlock_locks_ix ON distlock_locks (namespace, expires_at);";
    server.exec_admin(expiry_index).await.unwrap();
    let lock = client(&server).await;
    // That index made way for the one on `used_at`.
    let index = |name: &str| format!("SELECT COUNT(*) FROM pg_indexes WHERE indexname = '{name}';");
    assert_eq!(admin_value(&server, &index("distlock_locks_ix")).await, "0");
    assert_eq!(
        admin_value(&server, &index("distlock_locks_used")).await,
        "1"
    );
    let key = LockKey::new("new").unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    // The table got its `holder` column: the holder is named.
    let holder = lock.inspect().unwrap().holder(&key).await.unwrap().unwrap();
    assert_eq!(holder.meta, Some(HolderMeta::this_process()), "{holder:?}");
    lease.release().await.unwrap();
    assert_eq!(
        rows(&server, "distlock_locks").rows("old/").await.unwrap(),
        0
    );
    let floor = admin_value(&server, "SELECT floor FROM distlock_locks_hw;").await;
    assert_eq!(floor, "7");
    // A second client connects to the upgraded table without a change.
    client(&server).await;
}

/// A table of an earlier release made by hand (`create_table=false`) is
/// refused with the statement that adds its `holder` column; once run, the
/// table is used as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_table_without_holder_names_the_statement_to_run() {
    let server = server().await;
    server.exec_admin(&old_table("advisory")).await.unwrap();
    let config = || {
        PostgresConfig::from_url(&server.url())
            .unwrap()
            .strategy(Strategy::Advisory)
            .create_table(false)
    };
    let add = "ALTER TABLE \"distlock_advisory\" ADD COLUMN IF NOT EXISTS holder TEXT NULL";
    let added = async {
        server.exec_admin(&format!("{add};")).await?;
        // The rest of the schema (the high-water table) is create_table's.
        Ok(config().create_table(true).connect().await?)
    };
    missing_column_is_named_then_used(config().connect().await, add, added)
        .await
        .unwrap();
}

/// A `version_cas` table made by hand before `used_at` (with its `holder`)
/// is refused with the statement that adds the column; once run, the table
/// is used as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_table_without_used_at_names_the_statement_to_run() {
    let server = server().await;
    let holder = "ALTER TABLE distlock_locks ADD COLUMN holder TEXT NULL;";
    let old = format!("{} {holder}", old_table("version_cas"));
    server.exec_admin(&old).await.unwrap();
    let config = || {
        PostgresConfig::from_url(&server.url())
            .unwrap()
            .create_table(false)
    };
    let add = "ALTER TABLE \"distlock_locks\" ADD COLUMN IF NOT EXISTS used_at TIMESTAMPTZ NOT NULL \
               DEFAULT '-infinity'";
    let added = async {
        server.exec_admin(&format!("{add};")).await?;
        Ok(config().create_table(true).connect().await?)
    };
    missing_column_is_named_then_used(config().connect().await, add, added)
        .await
        .unwrap();
}

/// The lock table `distlock_{strategy}` as the release before `holder` made it.
fn old_table(strategy: &str) -> String {
    let table = match strategy {
        "version_cas" => "distlock_locks".to_owned(),
        other => format!("distlock_{other}"),
    };
    format!(
        "CREATE TABLE {table} (namespace TEXT NOT NULL, name TEXT NOT NULL, \
         owner TEXT NULL, fence BIGINT NOT NULL, expires_at TIMESTAMPTZ NULL, \
         lock_key BIGINT NULL UNIQUE, PRIMARY KEY (namespace, name)); \
         COMMENT ON TABLE {table} IS 'distlock:{strategy}'; \
         ALTER TABLE {table} OWNER TO distlock;"
    )
}
