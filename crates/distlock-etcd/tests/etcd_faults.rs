//! Faults between one client and etcd, through the testkit's TCP fault proxy.

mod common;

use common::{connect, eventually, queue, raw, server, through, unique};
use distlock_core::adapter::{AcquireRequest, Backend, Ownership, WaitUntil};
use distlock_core::{AcquireOptions, DistributedLock, HolderMeta, LockError, LossReason, Wait};
use distlock_etcd::EtcdConfig;
use distlock_etcd::client::PutOptions;
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::{Fault, FaultControl};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_ends_every_lease_of_the_client_by_its_local_deadline_before_etcd_frees_them() {
    let etcd = server().await;
    let proxy = FaultProxy::start(etcd.addr()).await.unwrap();
    let cut_off = through(&proxy, "partition/", Duration::from_secs(1)).await;
    let other = connect(&[etcd.addr()], "partition/").await;
    let ttl = Duration::from_secs(2);
    let (first, second) = (unique("first"), unique("second"));
    let opts = AcquireOptions::new().ttl(ttl);
    let leases = [
        cut_off.acquire(&first, &opts).await.unwrap(),
        cut_off.acquire(&second, &opts).await.unwrap(),
    ];
    let contender = {
        let (key, opts) = (
            first.clone(),
            opts.clone().wait(Wait::For(Duration::from_secs(20))),
        );
        tokio::spawn(async move {
            let lease = other.acquire(&key, &opts).await;
            (Instant::now(), lease)
        })
    };
    proxy.set_fault(Fault::Blackhole).await;
    let cut_at = Instant::now();
    let mut lost_at = cut_at;
    for lease in &leases {
        let reason = tokio::time::timeout(ttl * 2, lease.lost())
            .await
            .expect("lost() did not fire");
        assert_eq!(reason, LossReason::Expired);
        lost_at = lost_at.max(Instant::now());
        assert!(!lease.is_held());
    }
    assert!(
        lost_at - cut_at <= ttl + Duration::from_millis(250),
        "lost {:?} after the cut",
        lost_at - cut_at
    );
    // etcd keeps the lock until the lease expires on its side: later than the
    // client stopped believing in it.
    let (acquired_at, lease) = tokio::time::timeout(Duration::from_secs(20), contender)
        .await
        .unwrap()
        .unwrap();
    let lease = lease.unwrap();
    assert!(
        acquired_at >= lost_at,
        "etcd gave the lock away {:?} before the holder's deadline",
        lost_at - acquired_at
    );
    lease.release().await.unwrap();
    // Healed, the client takes a fresh lease and works again.
    proxy.set_fault(Fault::None).await;
    drop(leases);
    let again = cut_off
        .acquire(
            &second,
            &opts.clone().wait(Wait::For(Duration::from_secs(20))),
        )
        .await
        .unwrap();
    again.release().await.unwrap();
    assert_eq!(
        cut_off.backend().stats().leases_granted,
        2,
        "a new lease after the old one lapsed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_whose_first_reply_was_lost_never_deletes_a_newer_key() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let proxy = FaultProxy::start(etcd.addr()).await.unwrap();
    let lock = through(&proxy, "retry/", Duration::from_millis(500)).await;
    let key = unique("retried-release");
    let backend = lock.backend();
    let request = AcquireRequest {
        key: &key,
        ttl: Duration::from_secs(30),
        wait: WaitUntil::No,
        started: Instant::now(),
        meta: &HolderMeta::this_process(),
    };
    let acquired = backend.acquire(request).await.unwrap();
    let handle = acquired.handle;
    let our_key = handle.key().to_vec();

    // The release reaches etcd, but its reply comes after the request timeout.
    proxy
        .set_fault(Fault::Delay(Duration::from_millis(1500)))
        .await;
    let outcome = backend.release(&handle).await;
    assert!(
        matches!(outcome, Err(LockError::Unavailable { .. })),
        "{outcome:?}"
    );
    eventually(
        Duration::from_secs(10),
        "the delayed release applied",
        || async { queue(&raw, "retry/", &key).await.is_empty() },
    )
    .await;
    proxy.set_fault(Fault::None).await;

    // A newer holder's key with the very same name (the same lease re-locking the
    // name, as Go's Mutex does).
    let lease = raw.lease_client().grant(30).await.unwrap().id();
    raw.kv_client()
        .put(
            our_key.clone(),
            "",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    let newer = queue(&raw, "retry/", &key).await;

    // The retry compares the create revision, not just the name.
    assert_eq!(backend.release(&handle).await.unwrap(), Ownership::NotHeld);
    let after = queue(&raw, "retry/", &key).await;
    assert_eq!(after.len(), 1, "the retried release deleted the newer key");
    assert_eq!(after[0].create_revision(), newer[0].create_revision());
    assert_eq!(after[0].key(), our_key.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_dies_gets_an_error_and_never_the_lock() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let proxy = FaultProxy::start(etcd.addr()).await.unwrap();
    let cut_off = through(&proxy, "waiter/", Duration::from_secs(1)).await;
    let holder = connect(&[etcd.addr()], "waiter/").await;
    let key = unique("dying-waiter");
    let held = holder
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    let waiter = {
        let key = key.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions::new()
                .ttl(Duration::from_secs(2))
                .wait(Wait::Forever);
            cut_off
                .acquire(&key, &opts)
                .await
                .map(|lease| lease.token())
        })
    };
    eventually(Duration::from_secs(10), "waiter queued", || async {
        queue(&raw, "waiter/", &key).await.len() == 2
    })
    .await;
    proxy.set_fault(Fault::Blackhole).await;
    // The waiter's lease expires on etcd, which deletes its key...
    eventually(
        Duration::from_secs(10),
        "the dead waiter's key expired",
        || async { queue(&raw, "waiter/", &key).await.len() == 1 },
    )
    .await;
    // ...and the waiter itself gives up with an error, even before the release.
    let outcome = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        outcome.is_err(),
        "a waiter without a lease got the lock: {outcome:?}"
    );
    held.release().await.unwrap();
    assert!(queue(&raw, "waiter/", &key).await.is_empty());
}

/// etcd keeps its login tokens in the member's memory: a restart forgets them,
/// and the client logs in again at its first refused request (the lock
/// transaction, the lease's keep-alive stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_forgets_the_login_token_and_the_client_logs_in_again() {
    let etcd = server().await;
    etcd.enable_auth("root-secret-2").await.unwrap();
    let lock = EtcdConfig::new([etcd.addr().to_string()])
        .auth("root", "root-secret-2")
        .namespace("relogin/")
        .connect()
        .await
        .unwrap();
    let key = unique("relogin");
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(10)));
    let first = lock.acquire(&key, &opts).await.unwrap();
    let first_token = first.token();
    first.release().await.unwrap();

    etcd.restart().await.unwrap();
    let second = lock.acquire(&key, &opts).await.unwrap();
    assert!(second.token() > first_token);
    second.release().await.unwrap();
}
