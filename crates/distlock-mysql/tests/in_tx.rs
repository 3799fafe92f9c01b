//! `TxLock::lock_in`: a lock inside the caller's transaction. A second
//! transaction waits until the first ends; tokens rise across commit and
//! rollback; a holder whose connection is killed frees the lock.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockKey};
use distlock_mysql::{MySqlConfig, TxLock};
use distlock_testkit::servers::MariaDbServer;
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
    let mut tx = conn.begin().await.unwrap();
    let token = locks.lock_in(&mut tx, key).await.unwrap();
    tx.commit().await.unwrap();
    token
}

/// Transactions waiting for a row lock, as InnoDB lists them.
async fn lock_waits(server: &MariaDbServer) -> String {
    let sql = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT';";
    root_value(server, sql).await
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
    let second = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { lock_in(&locks, &mut other, &key).await }
    });
    let limit = Duration::from_secs(10);
    eventually(limit, "the second waits", async || {
        lock_waits(&server).await == "1"
    })
    .await;
    assert!(
        !second.is_finished(),
        "the second got the lock while the first held it"
    );
    tx.commit().await.unwrap();
    let next = second.await.unwrap();
    assert!(next > held, "{next} after {held}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_across_commit_and_rollback() {
    let server = server().await;
    let locks = tx_lock(&server).await;
    let key = LockKey::new("jobs/rising").unwrap();
    let mut conn = own_connection(&server).await;
    let mut tx = conn.begin().await.unwrap();
    let rolled_back = locks.lock_in(&mut tx, &key).await.unwrap();
    tx.rollback().await.unwrap();
    let committed = lock_in(&locks, &mut conn, &key).await;
    assert!(committed > rolled_back, "{committed} after {rolled_back}");
    let next = lock_in(&locks, &mut conn, &key).await;
    assert!(next > committed, "{next} after {committed}");
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
