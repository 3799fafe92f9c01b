//! Lease lifecycle details that the conformance cases do not reach directly.

use distlock_core::memory::{MemoryFault, MemoryStore};
use distlock_core::{
    AcquireOptions, DistributedLock, LockError, LockKey, LossReason, Renewal, Wait,
};
use std::time::Duration;

#[allow(clippy::unwrap_used, reason = "a constant valid key")]
fn key() -> LockKey {
    LockKey::new("lifecycle").unwrap()
}

#[tokio::test]
async fn a_cancelled_release_still_frees_the_lock() {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let lease = a.acquire(&key(), &AcquireOptions::new()).await.unwrap();
    // The release cannot reach the store, and the caller gives up on it.
    a.backend().set_fault(MemoryFault::Unreachable);
    let cancelled = tokio::time::timeout(Duration::from_millis(20), lease.release()).await;
    assert!(
        cancelled.is_err(),
        "release should still be waiting for the store"
    );
    a.backend().set_fault(MemoryFault::None);
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(2)));
    // The ttl is 30 s: only the release finished in the background frees it.
    let next = b
        .acquire(&key(), &opts)
        .await
        .expect("lock freed by the background release");
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_reply_later_than_the_ttl_is_a_timeout_and_the_lock_is_given_back() {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    a.backend()
        .set_fault(MemoryFault::Delay(Duration::from_millis(300)));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(200))
        .wait(Wait::For(Duration::from_secs(1)));
    match a.acquire(&key(), &opts).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(a.metrics().timeouts, 1);
    a.backend().set_fault(MemoryFault::None);
    let next = b.try_acquire(&key(), &AcquireOptions::new()).await.unwrap();
    assert!(
        next.is_some(),
        "the late lease must have been released or expired"
    );
}

#[tokio::test]
async fn lost_can_be_awaited_from_another_task_and_reports_the_reason() {
    let store = MemoryStore::new();
    let a = store.client();
    let lease = a.acquire(&key(), &AcquireOptions::new()).await.unwrap();
    let lost = tokio::spawn(lease.lost());
    assert!(store.delete(&key()));
    let reason = tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, LossReason::Revoked);
    assert!(!lease.is_held());
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(matches!(
        lease.guard(async {}).await,
        Err(LockError::Lost { .. })
    ));
    assert_eq!(a.metrics().lost, 1);
}

#[tokio::test]
async fn guard_stops_work_the_moment_the_lease_is_lost() {
    let store = MemoryStore::new();
    let a = store.client();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(300))
        .renewal(Renewal::Manual);
    let lease = a.acquire(&key(), &opts).await.unwrap();
    let started = std::time::Instant::now();
    let outcome = lease
        .guard(tokio::time::sleep(Duration::from_secs(10)))
        .await;
    assert!(matches!(
        outcome,
        Err(LockError::Lost {
            reason: LossReason::Expired,
            ..
        })
    ));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn renewals_and_releases_are_counted() {
    let store = MemoryStore::new();
    let a = store.client();
    let opts = AcquireOptions::new().renewal(Renewal::Manual);
    let lease = a.acquire(&key(), &opts).await.unwrap();
    lease.renew().await.unwrap();
    lease.release().await.unwrap();
    let m = a.metrics();
    assert_eq!((m.acquired, m.renewals, m.released, m.lost), (1, 1, 1, 0));
    // The same counters through the trait object applications hold.
    let dynamic: distlock_core::DynLock = std::sync::Arc::new(a);
    assert_eq!(dynamic.metrics(), Some(m));
}

#[tokio::test]
async fn a_release_past_the_local_deadline_reports_the_loss_even_if_the_watchdog_never_ran() {
    let store = MemoryStore::new();
    let a = store.client();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(400))
        .renewal(Renewal::Manual);
    let lease = a.acquire(&key(), &opts).await.unwrap();
    // A renewal that reaches the store 250 ms after it was sent: the store
    // keeps the lock 250 ms past the lease's local deadline.
    a.backend().set_fault(MemoryFault::Unreachable);
    let heal = async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        a.backend().set_fault(MemoryFault::None);
    };
    let (renewed, ()) = tokio::join!(lease.renew(), heal);
    renewed.unwrap();
    // The whole process stalls past the local deadline: on this one-thread
    // runtime the watchdog cannot run, as on a starved machine.
    std::thread::sleep(lease.remaining() + Duration::from_millis(50));
    assert!(store.holder(&key()).is_some(), "the store still holds it");
    let lost = lease.lost();
    match lease.release().await {
        Err(LockError::Lost {
            reason: LossReason::Expired,
            ..
        }) => {}
        other => panic!("a release past the deadline reported {other:?}"),
    }
    let reason = tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .expect("lost() fired at the release");
    assert_eq!(reason, LossReason::Expired);
    assert_eq!((a.metrics().released, a.metrics().lost), (0, 1));
}

/// A lease's watchdog starts a few milliseconds late, from a keeper task of
/// the runtime the lease began on; a runtime gone takes its keeper along,
/// and the next runtime's leases must still be renewed.
#[test]
fn leases_are_renewed_on_a_runtime_that_follows_a_finished_one() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let store = MemoryStore::new();
    let a = store.client();
    let opts = AcquireOptions::new().ttl(Duration::from_millis(300));
    runtime().block_on(async {
        let lease = a.acquire(&key(), &opts).await.unwrap();
        lease.release().await.unwrap();
    });
    runtime().block_on(async {
        let lease = a.acquire(&key(), &opts).await.unwrap();
        let renewed = async {
            while a.metrics().renewals < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), renewed)
            .await
            .expect("the lease was renewed three times (300 ms ttl)");
        assert!(lease.is_held());
        lease.release().await.unwrap();
    });
}
