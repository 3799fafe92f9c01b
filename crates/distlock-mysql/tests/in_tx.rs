//! `TxLock::lock_in`: a lock inside the caller's transaction. A second
//! transaction waits until the first ends; tokens rise across commit and
//! rollback; a holder whose connection is killed frees the lock.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockKey};
use distlock_mysql::{MySqlConfig, TxLock};
use distlock_testkit::servers::MariaDbServer;
use distlock_testkit::support as shared;
use sqlx::{Connection, MySqlConnection};
use std::sync::Arc;
use std::time::Duration;
use support::{eventually, root_value, server};

async fn tx_lock(server: &MariaDbServer) -> TxLock {
    let config = MySqlConfig::from_url(&server.url()).unwrap().table("in_tx");
    config.connect_tx_lock().await.expect("connects")
}

/// A connection of the caller's own.
async fn own_connection(server: &MariaDbServer) -> MySqlConnection {
    MySqlConnection::connect(&server.url())
        .await
        .expect("the caller's connection")
}

/// `locks.lock_in` in a transaction on `conn` that commits, and the token.
async fn lock_in(locks: &TxLock, conn: &mut MySqlConnection, key: &LockKey) -> FencingToken {
    lock_in_ending(locks, conn, key, true).await
}

/// `locks.lock_in` in a transaction on `conn` that commits (or rolls back),
/// and the token.
async fn lock_in_ending(
    locks: &TxLock,
    conn: &mut MySqlConnection,
    key: &LockKey,
    commit: bool,
) -> FencingToken {
    let mut tx = conn.begin().await.unwrap();
    let token = locks.lock_in(&mut tx, key).await.unwrap();
    match commit {
        true => tx.commit().await.unwrap(),
        false => tx.rollback().await.unwrap(),
    }
    token
}

/// Whether connection `id` is running `lock_in`'s locking read (1 or 0), read
/// live from `PROCESSLIST`. Not from InnoDB's `INNODB_TRX`: MariaDB serves it
/// from a snapshot that a read rebuilds only after 100 ms without readers, so
/// a poll that began before the wait kept seeing no wait, and a read blocked
/// while the optimizer reads its `const` row is not listed there at all.
async fn lock_waits(server: &MariaDbServer, id: u64) -> String {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id} \
         AND INFO LIKE 'SELECT fence FROM `in|_tx` WHERE name = % FOR UPDATE' ESCAPE '|';"
    );
    root_value(server, &sql).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_transaction_waits_until_the_first_ends() {
    let server = server().await;
    let locks = Arc::new(tx_lock(&server).await);
    let key = LockKey::new("jobs/exclusive").unwrap();
    let mut first = own_connection(&server).await;
    let mut tx = first.begin().await.unwrap();
    let held = locks.lock_in(&mut tx, &key).await.unwrap();
    let mut other = own_connection(&server).await;
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut other)
        .await
        .unwrap();
    let second = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { lock_in(&locks, &mut other, &key).await }
    });
    let waits = async || lock_waits(&server, id).await == "1";
    let end_first = async { Ok(tx.commit().await?) };
    shared::second_waits_for_the_first(held, second, waits, end_first)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_across_commit_and_rollback() {
    let server = server().await;
    let locks = tx_lock(&server).await;
    let key = LockKey::new("jobs/rising").unwrap();
    let mut conn = own_connection(&server).await;
    shared::tokens_rise_across_commit_and_rollback(async |commit| {
        Ok(lock_in_ending(&locks, &mut conn, &key, commit).await)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_connection_is_killed_frees_the_lock() {
    let server = server().await;
    let locks = tx_lock(&server).await;
    let key = LockKey::new("jobs/crashed").unwrap();
    let mut holder = own_connection(&server).await;
    let mut tx = holder.begin().await.unwrap();
    let held = locks.lock_in(&mut tx, &key).await.unwrap();
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    server.exec_root(&format!("KILL {id};")).await.unwrap();
    let next = lock_in(&locks, &mut own_connection(&server).await, &key).await;
    assert!(next > held, "{next} after {held}");
    drop(tx);
}

/// `lock_in` shares `for_update`'s rows, and they are collected too: a name
/// idle for `state_ttl` loses its lock and counter rows to the `lock_in`s of
/// new names, and its next token is above its earlier ones, which were put
/// ten days ahead of the server clock (a seed from the clock alone would go
/// back).
#[tokio::test(flavor = "multi_thread")]
async fn idle_rows_are_collected_and_tokens_still_rise() {
    let server = server().await;
    let state_ttl = Duration::from_secs(2);
    let config = MySqlConfig::from_url(&server.url()).unwrap();
    let locks = config.table("in_tx").state_ttl(state_ttl).connect_tx_lock();
    let locks = locks.await.expect("connects");
    let mut conn = own_connection(&server).await;
    let key = LockKey::new("jobs/idle").unwrap();
    for _ in 0..3 {
        lock_in(&locks, &mut conn, &key).await;
    }
    let rows = "SELECT COUNT(*) FROM distlock.in_tx WHERE name LIKE 'jobs/idle%';";
    assert_eq!(
        root_value(&server, rows).await,
        "2",
        "a lock row and a counter"
    );
    let ahead = 10 * 24 * 3600 * 1_000_000_u64;
    let push = format!(
        "UPDATE distlock.in_tx SET fence = fence + {ahead} WHERE name = CONCAT('jobs/idle', 0x1E);"
    );
    server.exec_root(&push).await.unwrap();
    let counter = "SELECT fence FROM distlock.in_tx WHERE name = CONCAT('jobs/idle', 0x1E);";
    let highest: u64 = root_value(&server, counter).await.parse().unwrap();
    let mut fresh = 0;
    eventually(
        state_ttl + Duration::from_secs(30),
        "collected",
        async || {
            fresh += 1;
            let name = LockKey::new(format!("fresh/{fresh}")).unwrap();
            lock_in(&locks, &mut conn, &name).await;
            root_value(&server, rows).await == "0"
        },
    )
    .await;
    let floor = root_value(&server, "SELECT floor FROM distlock.in_tx_hw;").await;
    assert!(
        floor.parse::<u64>().unwrap() >= highest,
        "floor {floor} below {highest}"
    );
    let after = lock_in(&locks, &mut own_connection(&server).await, &key).await;
    assert!(
        after.get() > highest,
        "{after} after collection, not above {highest}"
    );
}
