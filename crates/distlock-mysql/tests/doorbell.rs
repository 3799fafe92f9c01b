//! A release wakes the next waiter of `version_cas` and `unique_insert`
//! through the holder's doorbell: a push, not the waiter's poll.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Wait};
use distlock_mysql::Strategy;
use std::time::Duration;
use support::{client, eventually, root_value, server};

/// Sessions blocked in a doorbell wait, from `PROCESSLIST`.
const BELL_WAITS: &str = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
     WHERE INFO LIKE '%GET_LOCK(%' AND STATE = 'User lock'";

/// The holder's ttl (60 s) outlives the waiter's wait (10 s), and the waiter
/// is seen blocked in its doorbell wait, a `GET_LOCK` bounded by the holder's
/// expiry, before the release. From there no poll of its own runs before its
/// wait ends: only the release's push can hand it the lock.
async fn a_release_rings_the_waiter(strategy: Strategy) {
    let server = server().await;
    let table = format!("bell_{}", strategy.as_str());
    let holder = client(&server, strategy, &table).await;
    let waiter = client(&server, strategy, &table).await;
    let key = LockKey::new("doorbell").unwrap();
    let ttl = Duration::from_secs(60);
    let held = holder
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let waiting = {
        let key = key.clone();
        let opts = AcquireOptions::new()
            .ttl(ttl)
            .wait(Wait::For(Duration::from_secs(10)));
        tokio::spawn(async move { waiter.acquire(&key, &opts).await })
    };
    eventually(
        Duration::from_secs(5),
        "the waiter blocks on the holder's doorbell",
        async || root_value(&server, BELL_WAITS).await == "1",
    )
    .await;
    assert!(!waiting.is_finished(), "the waiter took a held lock");
    held.release().await.unwrap();
    let lease = waiting
        .await
        .unwrap()
        .expect("the release's doorbell hands the lock over within the waiter's wait");
    lease.release().await.unwrap();
    assert_eq!(root_value(&server, BELL_WAITS).await, "0");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_cas_release_rings_the_waiter() {
    a_release_rings_the_waiter(Strategy::VersionCas).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_unique_insert_release_rings_the_waiter() {
    a_release_rings_the_waiter(Strategy::UniqueInsert).await;
}
