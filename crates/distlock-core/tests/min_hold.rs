//! The minimum hold through the lease lifecycle, on the in-memory backend: a
//! release, a drop and renewals before it ends all leave the lock held until
//! `acquired + min_hold`. The conformance suite checks the same on servers.
#![allow(clippy::unwrap_used)] // test code: failing loudly is the point

use distlock_core::memory::MemoryStore;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Renewal, Wait};
use std::time::{Duration, Instant};

const MIN_HOLD: Duration = Duration::from_millis(700);

fn key() -> LockKey {
    LockKey::new("min-hold").unwrap()
}

fn waiting() -> AcquireOptions {
    AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)))
}

/// Acquires as `b` with a wait and returns how long after `since` it got in.
async fn next_holder_after(b: &impl DistributedLock, since: Instant) -> Duration {
    let next = b.acquire(&key(), &waiting()).await.unwrap();
    let waited = since.elapsed();
    next.release().await.unwrap();
    waited
}

#[tokio::test]
async fn a_release_within_min_hold_keeps_the_lock_until_it_ends() {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let asked = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .min_hold(MIN_HOLD);
    let lease = a.acquire(&key(), &opts).await.unwrap();
    lease.release().await.unwrap();
    assert!(
        b.try_acquire(&key(), &AcquireOptions::new())
            .await
            .unwrap()
            .is_none(),
        "released within its min_hold, the lock must stay held"
    );
    let waited = next_holder_after(&b, asked).await;
    assert!(
        waited >= MIN_HOLD,
        "freed after {waited:?}, before {MIN_HOLD:?}"
    );
    // Freed by its min_hold, not by its 10 s ttl.
    assert!(
        waited < Duration::from_secs(3),
        "freed only after {waited:?}"
    );
}

#[tokio::test]
async fn renewals_within_min_hold_never_bring_the_expiry_before_it() {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let ttl = Duration::from_millis(100);
    let asked = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .renewal(Renewal::Auto)
        .min_hold(MIN_HOLD);
    let lease = a.acquire(&key(), &opts).await.unwrap();
    // Let a few renewals (every ttl/3) run before the holder vanishes: a
    // renewal for the bare ttl would free the lock a ttl after this.
    while a.metrics().renewals < 3 {
        tokio::time::sleep(ttl / 10).await;
    }
    lease.abandon();
    let waited = next_holder_after(&b, asked).await;
    assert!(
        waited >= MIN_HOLD,
        "freed after {waited:?}, before {MIN_HOLD:?}"
    );
}

#[tokio::test]
async fn a_release_after_min_hold_frees_the_lock_at_once() {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .min_hold(Duration::from_millis(50));
    let lease = a.acquire(&key(), &opts).await.unwrap();
    while lease.remaining() > Duration::from_secs(10) - Duration::from_millis(200) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lease.release().await.unwrap();
    let next = b.try_acquire(&key(), &AcquireOptions::new()).await.unwrap();
    assert!(
        next.is_some(),
        "a release after min_hold must free the lock"
    );
}

#[tokio::test]
async fn a_set_that_could_not_be_taken_whole_keeps_no_key_for_its_min_hold() {
    use distlock_core::DistributedLockExt;
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let (first, second) = (LockKey::new("a").unwrap(), LockKey::new("b").unwrap());
    let held = b.acquire(&second, &AcquireOptions::new()).await.unwrap();
    let opts = AcquireOptions::new().min_hold(MIN_HOLD).wait(Wait::No);
    let taken = a.acquire_all(&[first.clone(), second], &opts).await;
    assert!(taken.is_err(), "the second key is held");
    let free = b.try_acquire(&first, &AcquireOptions::new()).await.unwrap();
    assert!(free.is_some(), "a key taken before the failure stayed held");
    held.release().await.unwrap();
}
