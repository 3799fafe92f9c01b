//! RedisLock against real server failures: a killed server, a restart that
//! empties it, an operator's DEL.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, client, raw, server};
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, LossReason, Wait};
use distlock_redis::{LockKeys, RedisConfig};
use std::time::{Duration, Instant};

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Wait::For(Duration::from_secs(20)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_fires_lost_by_the_local_deadline_and_acquires_work_after_restart() {
    let server = server().await;
    let lock = RedisConfig::from_url(&server.url())
        .unwrap()
        .timeouts(Timeouts::new(
            Duration::from_secs(5),
            Duration::from_millis(300),
        ))
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("kill/me").unwrap();
    let ttl = Duration::from_millis(800);
    let lease = lock.acquire(&key, &opts(800)).await.unwrap();
    let killed_at = Instant::now();
    server.kill();
    let reason = tokio::time::timeout(ttl * 2, lease.lost())
        .await
        .expect("lost() must fire");
    assert_eq!(reason, LossReason::Expired);
    // The deadline is at most one ttl after the last renewal, which came before the kill.
    assert!(
        killed_at.elapsed() <= ttl + Duration::from_millis(250),
        "lost after {:?}",
        killed_at.elapsed()
    );
    assert!(!lease.is_held());
    match lock.try_acquire(&key, &opts(800)).await {
        Err(e) => assert!(matches!(e, LockError::Unavailable { .. }), "{e}"),
        Ok(got) => panic!("acquire with the server down gave {got:?}"),
    }
    server.restart().await.unwrap();
    // The same client reconnects by itself.
    let again = lock
        .acquire(&key, &opts(5_000))
        .await
        .expect("acquire after restart");
    assert!(
        again.token() > lease.token(),
        "{} after {}",
        again.token(),
        lease.token()
    );
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_empties_redis_keeps_tokens_rising() {
    let server = server().await;
    let lock = client(&server).await;
    let key = LockKey::new("tokens").unwrap();
    let mut highest = 0;
    for _ in 0..5 {
        let lease = lock.acquire(&key, &opts(5_000)).await.unwrap();
        highest = highest.max(lease.token().get());
        lease.release().await.unwrap();
    }
    // No persistence: the restart loses the fence counter and the scripts.
    server.restart().await.unwrap();
    let mut conn = admin(&server).await;
    let keys: Vec<String> = raw(&mut conn, &["KEYS", "*"]).await;
    assert!(keys.is_empty(), "restart kept {keys:?}");
    let lease = lock
        .acquire(&key, &opts(5_000))
        .await
        .expect("acquire after the restart");
    assert!(
        lease.token().get() > highest,
        "token {} after restart, earlier {highest}",
        lease.token()
    );
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_del_fires_lost() {
    let server = server().await;
    let lock = client(&server).await;
    let key = LockKey::new("deleted").unwrap();
    let ttl = Duration::from_millis(600);
    let lease = lock.acquire(&key, &opts(600)).await.unwrap();
    let mut conn = admin(&server).await;
    let deleted: i64 = raw(&mut conn, &["DEL", &LockKeys::new("distlock:", &key).lock]).await;
    assert_eq!(deleted, 1, "the lock key is where the docs say");
    // The next renewal (every ttl/3) finds the key gone.
    let reason = tokio::time::timeout(ttl, lease.lost())
        .await
        .expect("lost() after DEL");
    assert_eq!(reason, LossReason::Revoked);
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_follow_the_documented_layout() {
    let server = server().await;
    let lock = RedisConfig::from_url(&format!("{}?namespace=app:", server.url()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("a{b}%c").unwrap();
    let lease = lock.acquire(&key, &opts(5_000)).await.unwrap();
    let mut conn = admin(&server).await;
    let mut keys: Vec<String> = raw(&mut conn, &["KEYS", "*"]).await;
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "app:high-water",
            "app:{a%7Bb%7D%25c}",
            "app:{a%7Bb%7D%25c}:fence"
        ]
    );
    let pttl: i64 = raw(&mut conn, &["PTTL", "app:{a%7Bb%7D%25c}"]).await;
    assert!(pttl > 0 && pttl <= 5_000, "lock key pttl {pttl}");
    let fence_ttl: i64 = raw(&mut conn, &["PTTL", "app:{a%7Bb%7D%25c}:fence"]).await;
    // Kept the ttl plus the default state_ttl of a day.
    let day = 86_400_000;
    assert!(
        fence_ttl > day && fence_ttl <= day + 5_000,
        "fence counter pttl {fence_ttl}"
    );
    let fence: u64 = raw(&mut conn, &["GET", "app:{a%7Bb%7D%25c}:fence"]).await;
    assert_eq!(fence, lease.token().get());
    let high_water: u64 = raw(&mut conn, &["GET", "app:high-water"]).await;
    assert_eq!(high_water, fence);
    let high_water_ttl: i64 = raw(&mut conn, &["PTTL", "app:high-water"]).await;
    assert_eq!(high_water_ttl, -1, "the high-water never expires");
    lease.release().await.unwrap();
}

/// `SCRIPT FLUSH` (or a restart) between the steps of a lease: each step's
/// `EVALSHA` answers `NOSCRIPT`, and the client loads the script and sends
/// the step again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_scripts_are_loaded_again_at_every_step() {
    let server = server().await;
    let lock = client(&server).await;
    let mut conn = admin(&server).await;
    let key = LockKey::new("flushed").unwrap();
    let flush = || async {
        let mut conn = admin(&server).await;
        let done: String = raw(&mut conn, &["SCRIPT", "FLUSH"]).await;
        assert_eq!(done, "OK");
    };
    flush().await;
    let lease = lock.acquire(&key, &opts(5_000)).await.unwrap();
    flush().await;
    lease.renew().await.expect("renew after SCRIPT FLUSH");
    flush().await;
    lease.release().await.expect("release after SCRIPT FLUSH");
    let lock_key = LockKeys::new("distlock:", &key).lock;
    let left: i64 = raw(&mut conn, &["EXISTS", &lock_key]).await;
    assert_eq!(left, 0, "the release deleted the lock key");
}
