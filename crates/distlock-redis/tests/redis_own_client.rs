//! A lock built from the application's own `redis::Client`: it reaches the
//! server, database and login that client names, excludes a second client
//! and hands out rising tokens; clients it cannot serve are refused.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, raw};
use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey};
use distlock_redis::RedisConfig;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_from_the_apps_client_uses_its_database_excludes_and_raises_tokens() {
    let server = common::server().await;
    let app_client = redis::Client::open(format!("{}3", server.url())).unwrap();
    let config = RedisConfig::from_client(&app_client)
        .unwrap()
        .namespace("own:");
    assert_eq!(config.endpoint(), format!("redis://{}/3", server.addr()));
    let lock = config.clone().connect().await.unwrap();
    let other = config.connect().await.unwrap();
    let key = LockKey::new("own-client").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));

    let first = lock.acquire(&key, &opts).await.unwrap();
    assert!(other.try_acquire(&key, &opts).await.unwrap().is_none());
    // The lock's keys are in the client's database 3, not in database 0.
    let mut db3 = app_client.get_multiplexed_async_connection().await.unwrap();
    let held: Vec<String> = raw(&mut db3, &["KEYS", "own:*"]).await;
    assert!(!held.is_empty(), "no lock key in database 3");
    let in_db0: Vec<String> = raw(&mut admin(&server).await, &["KEYS", "own:*"]).await;
    assert!(in_db0.is_empty(), "lock keys in database 0: {in_db0:?}");

    let first_token = first.token();
    first.release().await.unwrap();
    let second = other.acquire(&key, &opts).await.unwrap();
    assert!(
        second.token() > first_token,
        "{} after {first_token}",
        second.token()
    );
    second.release().await.unwrap();
}

#[test]
fn a_client_on_a_unix_socket_is_refused_with_the_reason() {
    let client = redis::Client::open("redis+unix:///tmp/distlock-none.sock").unwrap();
    let err = RedisConfig::from_client(&client).unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("Unix socket"), "{err}");
}

#[test]
fn the_clients_password_never_shows() {
    let client = redis::Client::open("redis://app:hunter2@127.0.0.1:6379/4").unwrap();
    let config = RedisConfig::from_client(&client).unwrap();
    assert_eq!(config.endpoint(), "redis://127.0.0.1:6379/4");
    assert!(!format!("{config:?}").contains("hunter2"));
}
