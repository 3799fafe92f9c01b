//! Bounded state of every strategy: rows of names idle
//! for `state_ttl` are deleted by later acquires, a bounded number each,
//! never the counter of a name held, and a name used again afterwards gets
//! tokens above all its earlier ones, even when the server clock is now below
//! them, or a session's clock is.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, HolderMeta, LockKey};
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::servers::{MariaDbServer, MovableClock};
use distlock_testkit::state_rows::{
    RowDatabase, SqlRows, a_held_name_keeps_its_counter, collect,
    collected_name_rises_after_the_clock_steps_back, collected_names_rise_above_a_clock_behind,
    missing_column_is_named_then_used, use_once,
};
use sqlx::{Connection, MySqlConnection};
use std::time::Duration;
use support::{root_value, server};

const STATE_TTL: Duration = Duration::from_secs(2);

async fn client(server: &MariaDbServer) -> DynLock {
    client_on(server, Strategy::VersionCas, "distlock_locks").await
}

async fn client_on(server: &MariaDbServer, strategy: Strategy, table: &str) -> DynLock {
    MySqlConfig::from_url(&server.url())
        .unwrap()
        .strategy(strategy)
        .table(table)
        .state_ttl(STATE_TTL)
        .connect()
        .await
        .unwrap()
}

/// The lock table `table` of `server`, as the scenarios read and change it:
/// a name's fence is in its lock row (`version_cas`) or its counter row, and
/// `for_update` keeps both rows of a name (its table is `distlock_for_update`).
fn rows<'a>(server: &'a MariaDbServer, table: &str) -> SqlRows<'a> {
    SqlRows {
        per_name: if table == "distlock_for_update" { 2 } else { 1 },
        operator: server,
        table: format!("distlock.{table}"),
        fence_rows: "name IN ('{name}', CONCAT('{name}', 0x1E))",
        clock: "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED);",
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
/// an hour gets a token above its earlier ones, on every strategy.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_after_a_collection_even_when_the_server_clock_steps_back() {
    let clock = MovableClock::new().expect("cc builds the clock shim");
    let server = MariaDbServer::start_with_clock(&clock).await.unwrap();
    for (strategy, table) in [
        (Strategy::VersionCas, "distlock_locks"),
        (Strategy::UniqueInsert, "distlock_unique"),
        (Strategy::ForUpdate, "distlock_for_update"),
    ] {
        clock.set_back(Duration::ZERO).unwrap();
        let lock = MySqlConfig::from_url(&server.url())
            .unwrap()
            .strategy(strategy)
            .table(table)
            .state_ttl(STATE_TTL)
            .connect()
            .await
            .unwrap();
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

/// The same for `unique_insert`'s lock and counter rows.
#[tokio::test(flavor = "multi_thread")]
async fn idle_unique_insert_counters_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client_on(&server, Strategy::UniqueInsert, "distlock_locks").await;
    let rows = rows(&server, "distlock_locks");
    collected_names_rise_above_a_clock_behind(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// The same for `for_update`'s lock and counter rows.
#[tokio::test(flavor = "multi_thread")]
async fn idle_for_update_rows_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let lock = client_on(&server, Strategy::ForUpdate, "distlock_for_update").await;
    let rows = rows(&server, "distlock_for_update");
    collected_names_rise_above_a_clock_behind(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// A `unique_insert` name held for longer than `state_ttl` keeps its lock
/// and counter rows while new names collect idle ones.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_unique_insert_name_keeps_its_counter() {
    let server = server().await;
    let lock = client_on(&server, Strategy::UniqueInsert, "distlock_locks").await;
    let rows = rows(&server, "distlock_locks");
    a_held_name_keeps_its_counter(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// The same for a `for_update` name: its lock row is skipped, never waited
/// for, and its counter kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_for_update_name_keeps_its_rows() {
    let server = server().await;
    let lock = client_on(&server, Strategy::ForUpdate, "distlock_for_update").await;
    let rows = rows(&server, "distlock_for_update");
    a_held_name_keeps_its_counter(&lock, &rows, STATE_TTL)
        .await
        .unwrap();
}

/// More `for_update` names held for longer than `state_ttl` than one
/// collection reads (16 idle-looking counters, oldest first) do not stop
/// collection: a held name's counter is stamped again, leaving the oldest
/// rows, so the idle names behind them are collected, and the held ones keep
/// their rows. The table's statistics are those of its creation (empty, never
/// recounted), with which the optimizer would scan the whole table for the
/// collection's statements: a `DELETE` that scans waits on every held row it
/// meets, and the acquire that collects retried it until its wait ended.
#[tokio::test(flavor = "multi_thread")]
async fn names_held_for_long_do_not_stop_collection() {
    let server = server().await;
    let table = "distlock_held_long";
    let lock = client_on(&server, Strategy::ForUpdate, table).await;
    let stale = format!(
        "ALTER TABLE distlock.{table} STATS_AUTO_RECALC = 0; ANALYZE TABLE distlock.{table};"
    );
    server.exec_root(&stale).await.unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(1));
    let mut leases = Vec::new();
    for i in 0..20 {
        let key = LockKey::new(format!("held/{i}")).unwrap();
        leases.push(lock.acquire(&key, &opts).await.unwrap());
    }
    for i in 0..20 {
        use_once(&lock, &format!("idle/{i}")).await.unwrap();
    }
    let rows = rows(&server, table);
    collect(&lock, &rows, &["idle/"], STATE_TTL).await.unwrap();
    assert_eq!(rows.rows("held/").await.unwrap(), 40);
    for lease in leases {
        assert!(lease.is_held());
        lease.release().await.unwrap();
    }
}

/// The seed's clock is the server's, which no session can move: a client
/// whose sessions start an hour back with another time zone (the server's
/// `init_connect`, which runs for every session of a user without SUPER)
/// gets tokens above a name's earlier ones after its rows were collected
/// (the floor decides) and again after an operator deleted them, which
/// raises no floor (the clock decides: a seed from `NOW(6)`, the session's
/// clock, would go an hour back).
#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_for_a_client_whose_sessions_move_their_clock() {
    let server = server().await;
    for (strategy, table) in [
        (Strategy::VersionCas, "distlock_locks"),
        (Strategy::UniqueInsert, "distlock_unique"),
    ] {
        server
            .exec_root("SET GLOBAL init_connect = '';")
            .await
            .unwrap();
        let client = |table| {
            let config = MySqlConfig::from_url(&server.url()).unwrap();
            config
                .strategy(strategy)
                .table(table)
                .state_ttl(STATE_TTL)
                .connect()
        };
        let lock = client(table).await.unwrap();
        let rows = rows(&server, table);
        let mut last = 0;
        for _ in 0..3 {
            last = use_once(&lock, "moved").await.unwrap();
        }
        collect(&lock, &rows, &["moved"], STATE_TTL).await.unwrap();
        let moved_clock = "SET GLOBAL init_connect = \
             'SET timestamp = UNIX_TIMESTAMP() - 3600, time_zone = ''+13:00''';";
        server.exec_root(moved_clock).await.unwrap();
        let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
        let behind: f64 = sqlx::query_scalar(
            "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) - UNIX_TIMESTAMP(NOW(6)) AS DOUBLE)",
        )
        .fetch_one(&mut probe)
        .await
        .unwrap();
        assert!(behind > 3000.0, "a session's NOW(6) is {behind} s behind");
        let moved = client(table).await.unwrap();
        let after_collection = use_once(&moved, "moved").await.unwrap();
        assert!(
            after_collection > last,
            "{strategy:?}: {after_collection} after {last}"
        );
        let delete =
            format!("DELETE FROM distlock.{table} WHERE name IN ('moved', CONCAT('moved', 0x1E));");
        server.exec_root(&delete).await.unwrap();
        let after_delete = use_once(&moved, "moved").await.unwrap();
        assert!(
            after_delete > after_collection,
            "{strategy:?}: {after_delete} after {after_collection}, deleted by hand"
        );
    }
    server
        .exec_root("SET GLOBAL init_connect = '';")
        .await
        .unwrap();
}

/// Rows an earlier release left (no expiry stamp) are collected too, and the
/// schema changes (bounded state, the `holder` column) apply to a table that
/// release created.
#[tokio::test(flavor = "multi_thread")]
async fn rows_of_the_previous_release_are_collected() {
    let server = server().await;
    server
        .exec_root(&format!(
            "{} INSERT INTO distlock.distlock_locks (name, fence) VALUES ('old/1', 5), ('old/2', 7);",
            old_table("version_cas")
        ))
        .await
        .unwrap();
    let lock = client(&server).await;
    let index = "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'distlock' \
                 AND TABLE_NAME = 'distlock_locks' AND INDEX_NAME = 'distlock_idle';";
    assert_eq!(root_value(&server, index).await, "1");
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
    let floor = root_value(&server, "SELECT floor FROM distlock.distlock_locks_hw;").await;
    assert_eq!(floor, "7");
    // A second client connects to the upgraded table without a change.
    client(&server).await;
}

/// A table of an earlier release made by hand (`create_table=false`) is
/// refused with the statement that adds its `holder` column; once run, the
/// table keeps its rows and names its holders.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_table_without_holder_names_the_statement_to_run() {
    let server = server().await;
    server.exec_root(&old_table("unique_insert")).await.unwrap();
    let config = || {
        MySqlConfig::from_url(&server.url())
            .unwrap()
            .strategy(Strategy::UniqueInsert)
    };
    let add = "ALTER TABLE `distlock_locks` ADD COLUMN holder VARBINARY(512) NULL DEFAULT NULL AFTER owner";
    let added = async {
        server.exec_root(&format!("USE distlock; {add};")).await?;
        // The rest of the schema (the high-water table) is create_table's.
        Ok(config().connect().await?)
    };
    let refused = config().create_table(false).connect().await;
    missing_column_is_named_then_used(refused, add, added)
        .await
        .unwrap();
}

/// The lock table as the release before `holder` made it for `strategy`.
fn old_table(strategy: &str) -> String {
    format!(
        "CREATE TABLE distlock.distlock_locks (name VARBINARY(255) NOT NULL, \
         owner VARBINARY(64) NULL DEFAULT NULL, fence BIGINT UNSIGNED NOT NULL DEFAULT 0, \
         expires_at TIMESTAMP(6) NULL DEFAULT NULL, PRIMARY KEY (name)) ENGINE=InnoDB \
         COMMENT='distlock:{strategy}';"
    )
}
