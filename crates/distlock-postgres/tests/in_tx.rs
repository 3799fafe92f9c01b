//! `TxLock::lock_in`: a lock inside the caller's transaction. A second
//! transaction waits until the first ends; tokens rise across commit and
//! rollback; a holder whose connection dies frees the lock; the same through
//! PgBouncer in transaction pooling mode.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockKey};
use distlock_postgres::{PostgresConfig, TxLock};
use distlock_testkit::servers::{PgBouncerServer, PostgresServer};
use distlock_testkit::support as shared;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use std::str::FromStr;
use support::{admin_value, server};

async fn tx_lock(url: &str) -> TxLock {
    let config = PostgresConfig::from_url(url).unwrap().table("in_tx");
    config.connect_tx_lock().await.expect("connects")
}

/// A connection of the caller's own (sending nothing a pooler keeps).
async fn own_connection(url: &str) -> PgConnection {
    let options = PgConnectOptions::from_str(url).unwrap();
    let options = options.statement_cache_capacity(0).extra_float_digits(None);
    options.connect().await.expect("the caller's connection")
}

/// Advisory locks someone waits for at `server`.
async fn waiting(server: &PostgresServer) -> String {
    let sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted;";
    admin_value(server, sql).await
}

/// `locks.lock_in` in a transaction on `conn` that commits, and the token.
async fn lock_in(locks: &TxLock, conn: &mut PgConnection, key: &LockKey) -> FencingToken {
    lock_in_ending(locks, conn, key, true).await
}

/// `locks.lock_in` in a transaction on `conn` that commits (or rolls back),
/// and the token.
async fn lock_in_ending(
    locks: &TxLock,
    conn: &mut PgConnection,
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

/// Exclusion: the second waits (the server shows its wait) until the first's
/// transaction commits, then gets a higher token.
async fn second_waits(server: &PostgresServer, url: &str) {
    let locks = std::sync::Arc::new(tx_lock(url).await);
    let key = LockKey::new("jobs/exclusive").unwrap();
    let mut first = own_connection(url).await;
    let mut tx = first.begin().await.unwrap();
    let held = locks.lock_in(&mut tx, &key).await.unwrap();
    let second = tokio::spawn({
        let (locks, key, url) = (locks.clone(), key.clone(), url.to_owned());
        async move { lock_in(&locks, &mut own_connection(&url).await, &key).await }
    });
    let waits = async || waiting(server).await == "1";
    let end_first = async { Ok(tx.commit().await?) };
    shared::second_waits_for_the_first(held, second, waits, end_first)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_transaction_waits_until_the_first_ends() {
    let server = server().await;
    second_waits(&server, &server.url()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_rise_across_commit_and_rollback() {
    let server = server().await;
    let locks = tx_lock(&server.url()).await;
    let key = LockKey::new("jobs/rising").unwrap();
    let mut conn = own_connection(&server.url()).await;
    shared::tokens_rise_across_commit_and_rollback(async |commit| {
        Ok(lock_in_ending(&locks, &mut conn, &key, commit).await)
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_connection_dies_frees_the_lock() {
    let server = server().await;
    let locks = tx_lock(&server.url()).await;
    let key = LockKey::new("jobs/crashed").unwrap();
    let mut holder = own_connection(&server.url()).await;
    let mut tx = holder.begin().await.unwrap();
    let held = locks.lock_in(&mut tx, &key).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let killed = admin_value(&server, &format!("SELECT pg_terminate_backend({pid});")).await;
    assert_eq!(killed, "t");
    let next = lock_in(&locks, &mut own_connection(&server.url()).await, &key).await;
    assert!(next > held, "{next} after {held}");
    drop(tx);
}

#[tokio::test(flavor = "multi_thread")]
async fn through_pgbouncer_a_second_transaction_waits_until_the_first_ends() {
    let bouncer = match PgBouncerServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start PgBouncer for the test: {e}"),
    };
    let url = format!("{}?pooler=transaction", bouncer.url());
    second_waits(bouncer.postgres(), &url).await;
}
