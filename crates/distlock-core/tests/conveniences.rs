//! `with_lock` and `acquire_all` on the memory backend: what the conformance
//! cases do not cover (a `DynLock` in a spawned task, a member's loss, a
//! release that reports one failure and still frees the rest, refused input).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use distlock_core::memory::MemoryStore;
use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, DynLock, Held, LockError, LockKey,
    LossReason,
};
use std::sync::Arc;
use std::time::Duration;

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(Duration::from_secs(30))
}

#[tokio::test]
async fn with_lock_on_a_dyn_lock_runs_in_a_spawned_task() {
    let lock: DynLock = Arc::new(MemoryStore::new().client());
    let task = tokio::spawn(async move {
        let k = key("spawned");
        lock.with_lock(&k, &opts(), |lease| {
            let token = lease.token();
            async move { Ok::<_, LockError>(token) }
        })
        .await
    });
    let token = task.await.unwrap().unwrap();
    assert!(token.get() > 0);
}

#[tokio::test]
async fn a_member_lost_fires_lost_and_stops_guarded_work() {
    let store = MemoryStore::new();
    let (lock, operator) = (store.client(), store.client());
    let keys = [key("m/b"), key("m/a")];
    let both = lock.acquire_all(&keys, &opts()).await.unwrap();
    let lost = both.lost();
    let inspect = operator.inspect().unwrap();
    assert!(inspect.delete_holder(&key("m/b")).await.unwrap());
    let (which, reason) = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() did not fire");
    assert_eq!((which, reason), (key("m/b"), LossReason::Revoked));
    assert!(!both.is_held());
    let guarded = both.guard(std::future::pending::<()>()).await;
    assert!(
        matches!(&guarded, Err(LockError::Lost { key: k, .. }) if *k == key("m/b")),
        "{guarded:?}"
    );
}

#[tokio::test]
async fn release_reports_the_first_error_and_frees_every_other_member() {
    let store = MemoryStore::new();
    let (lock, other) = (store.client(), store.client());
    let keys = [key("r/a"), key("r/b"), key("r/c")];
    let all = lock.acquire_all(&keys, &opts()).await.unwrap();
    assert!(
        other
            .inspect()
            .unwrap()
            .delete_holder(&key("r/b"))
            .await
            .unwrap()
    );
    let released = all.release().await;
    assert!(
        matches!(&released, Err(LockError::Lost { key: k, .. }) if *k == key("r/b")),
        "{released:?}"
    );
    for k in [key("r/a"), key("r/c")] {
        assert!(
            other.try_acquire(&k, &opts()).await.unwrap().is_some(),
            "{k} still held"
        );
    }
}

#[tokio::test]
async fn acquire_all_refuses_no_keys_and_bad_options_taking_nothing() {
    let store = MemoryStore::new();
    let lock = store.client();
    let none = lock.acquire_all(&[], &opts()).await;
    assert!(
        matches!(none, Err(LockError::InvalidOptions { .. })),
        "{none:?}"
    );
    let zero_ttl = AcquireOptions::new().ttl(Duration::ZERO);
    let bad = lock.acquire_all(&[key("z")], &zero_ttl).await;
    assert!(
        matches!(bad, Err(LockError::InvalidOptions { .. })),
        "{bad:?}"
    );
    assert!(store.holder(&key("z")).is_none());
}
