//! A Redis Cluster losing one primary (no replicas): locks in its slots fail
//! with `Unavailable` (never a second holder), locks in the other slots keep
//! working, and once the primary is back (its data persisted with AOF) its
//! locks are held as before.
// A failed set-up or step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Renewal, Wait};
use distlock_redis::{LockKeys, RedisConfig};
use distlock_testkit::servers::{RedisCluster, RedisOptions};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "faults:";

#[tokio::test]
async fn a_dead_primary_fails_only_its_own_locks_and_keeps_them_when_back() {
    let options = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    let runtime = tokio::runtime::Handle::current();
    let start = move || runtime.block_on(RedisCluster::start_with(3, options));
    let cluster = tokio::task::spawn_blocking(start).await.unwrap().unwrap();
    let lock = RedisConfig::from_url(&format!("{}?timeout=1s", cluster.url()))
        .unwrap()
        .namespace(NAMESPACE)
        .connect()
        .await
        .unwrap();
    // One key on node 0, one elsewhere.
    let (mut on_dead, mut elsewhere) = (None, None);
    for n in 0..64 {
        let key = LockKey::new(format!("fault/{n}")).unwrap();
        let lock_key = LockKeys::new(NAMESPACE, &key).lock;
        let slot = cluster
            .cli(0, &["CLUSTER", "KEYSLOT", &lock_key])
            .await
            .unwrap();
        match cluster
            .owner_of(slot.trim().parse().unwrap())
            .await
            .unwrap()
        {
            0 if on_dead.is_none() => on_dead = Some(key),
            1 | 2 if elsewhere.is_none() => elsewhere = Some(key),
            _ => {}
        }
    }
    let (on_dead, elsewhere) = (on_dead.unwrap(), elsewhere.unwrap());
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .renewal(Renewal::Manual)
        .wait(Wait::No);
    let held = lock.acquire(&on_dead, &options).await.unwrap();

    cluster.nodes()[0].stop().await;
    let refused = lock.acquire(&on_dead, &options).await;
    assert!(
        matches!(refused, Err(LockError::Unavailable { .. })),
        "{refused:?}"
    );
    let other = lock.acquire(&elsewhere, &options).await.unwrap();
    other.release().await.unwrap();

    cluster.nodes()[0].restart().await.unwrap();
    cluster.wait_ok().await.unwrap();
    // The persisted lock is still held: another acquire is refused as busy,
    // and the holder renews it.
    let back = Instant::now();
    let busy = loop {
        match lock.acquire(&on_dead, &options).await {
            Err(LockError::Unavailable { .. }) if back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            outcome => break outcome,
        }
    };
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
    held.renew().await.unwrap();
    held.release().await.unwrap();
    eprintln!(
        "the primary's locks answered again {:?} after its restart",
        back.elapsed()
    );
}
