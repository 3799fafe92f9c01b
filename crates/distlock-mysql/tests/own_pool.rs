//! A lock built from the application's own `sqlx::MySqlPool`: on connections
//! of its own, in UTC whatever time zone the pool's connections use, so two
//! pools in different zones agree on expiry; it excludes and raises tokens;
//! a `for_update` lock's transaction is never on one of the pool's
//! connections, and the pool's session settings are left as they were.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, LockKey, Wait};
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::servers::MariaDbServer;
use sqlx::MySqlPool;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use std::str::FromStr;
use std::time::{Duration, Instant};
use support::{holder_session, server};

/// The application's pool, its connections in time zone `zone`.
async fn app_pool(server: &MariaDbServer, zone: &str) -> MySqlPool {
    let options = MySqlConnectOptions::from_str(&server.url())
        .unwrap()
        .timezone(Some(zone.to_owned()));
    MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("the application's pool connects")
}

async fn lock(pool: &MySqlPool, strategy: Strategy, table: &str) -> DynLock {
    let config = MySqlConfig::from_pool(pool).strategy(strategy).table(table);
    config
        .connect()
        .await
        .expect("connects from the pool's options")
}

async fn session_zone(pool: &MySqlPool) -> String {
    sqlx::query_scalar("SELECT @@session.time_zone")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The server thread of the pool's one connection.
async fn thread_of(pool: &MySqlPool) -> u64 {
    sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_in_other_time_zones_agree_on_expiry_exclude_and_raise_tokens() {
    let server = server().await;
    let east = app_pool(&server, "+05:00").await;
    let west = app_pool(&server, "-03:00").await;
    let first = lock(&east, Strategy::VersionCas, "own_pool").await;
    let second = lock(&west, Strategy::VersionCas, "own_pool").await;
    let key = LockKey::new("jobs/own-pool").unwrap();
    let ttl = Duration::from_secs(2);
    let short = AcquireOptions::new().ttl(ttl);
    let held = first.acquire(&key, &short).await.unwrap();
    let token = held.token();
    assert!(second.try_acquire(&key, &short).await.unwrap().is_none());
    // The holder goes silent: the other zone's client gets the lock when the
    // lease ends, not hours early or late.
    let started = Instant::now();
    held.abandon();
    let wait = short.clone().wait(Wait::For(Duration::from_secs(10)));
    let next = second.acquire(&key, &wait).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited <= Duration::from_secs(4),
        "took {waited:?} for a 2 s lease"
    );
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
    assert_eq!(session_zone(&east).await, "+05:00");
    assert_eq!(session_zone(&west).await, "-03:00");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_for_update_lock_from_the_apps_pool_is_never_on_the_pools_connection() {
    let server = server().await;
    let pool = app_pool(&server, "+05:00").await;
    let app_thread = thread_of(&pool).await;
    let first = lock(&pool, Strategy::ForUpdate, "own_pool_rows").await;
    let second = lock(&pool, Strategy::ForUpdate, "own_pool_rows").await;
    let key = LockKey::new("jobs/own-rows").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let held = first.acquire(&key, &opts).await.unwrap();
    // The holder's transaction is on the session its locking statement wrote
    // into the row, read live (InnoDB's INNODB_TRX is a snapshot that
    // back-to-back reads never refresh).
    let holder = holder_session(&server, "own_pool_rows", key.as_str()).await;
    assert_ne!(
        holder, app_thread,
        "the lock's transaction on the pool's connection"
    );
    assert!(second.try_acquire(&key, &opts).await.unwrap().is_none());
    let token = held.token();
    held.release().await.unwrap();
    let next = second.acquire(&key, &opts).await.unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
    let still = thread_of(&pool).await;
    assert_eq!(still, app_thread, "the pool's connection was replaced");
    assert_eq!(session_zone(&pool).await, "+05:00");
}
