//! A frozen server (SIGSTOP: sockets open, nothing answers) while a
//! `version_cas` lock is held and another client waits: the holder's `lost()`
//! fires at its local deadline, nobody else gets in while the server is frozen,
//! and once it runs again the waiter gets the lock with a higher token. The
//! critical sections never overlap. And a `for_update` keepalive cut short
//! while the server is frozen leaves the held connection in step.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, LossReason, Renewal, Wait};
use distlock_mysql::Strategy;
use distlock_testkit::{History, Section};
use std::time::{Duration, Instant};
use support::{client, server};

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_server_keeps_mutual_exclusion_and_hands_over_after() {
    let server = server().await;
    let (holder, waiter) = (
        client(&server, Strategy::VersionCas, "locks").await,
        client(&server, Strategy::VersionCas, "locks").await,
    );
    let key = LockKey::new("frozen").unwrap();
    let ttl = Duration::from_secs(2);
    let history = History::new();

    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let entered = Instant::now();
    let lost = lease.lost();
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Wait::For(Duration::from_secs(60)));
    let waiting = {
        let key = key.clone();
        tokio::spawn(async move {
            let lease = waiter.acquire(&key, &opts).await.unwrap();
            let entered = Instant::now();
            tokio::task::yield_now().await;
            let section = Section {
                key: lease.key().clone(),
                token: lease.token(),
                client: 1,
                entered,
                left: Instant::now(),
            };
            lease.release().await.unwrap();
            section
        })
    };
    // Held past its ttl: renewal works while the server runs.
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert!(lease.is_held(), "renewal kept the lease before the freeze");

    server.pause().unwrap();
    let frozen_at = Instant::now();
    let reason = tokio::time::timeout(ttl + Duration::from_secs(1), lost).await;
    let lost_at = Instant::now();
    let reason = reason.expect("lost() fires while the server is frozen");
    assert_eq!(reason, LossReason::Expired);
    assert!(!lease.is_held());
    assert!(
        lost_at - frozen_at <= ttl + Duration::from_millis(200),
        "lost() after {:?} frozen, ttl {ttl:?}",
        lost_at - frozen_at
    );
    assert!(
        !waiting.is_finished(),
        "the waiter got the lock while the server was frozen"
    );
    history.record(Section {
        key: key.clone(),
        token: lease.token(),
        client: 0,
        entered,
        left: lost_at,
    });
    server.resume().unwrap();

    let next = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter gets the lock once the server runs again")
        .unwrap();
    println!(
        "frozen for {:?}; the waiter got in {:?} after the loss",
        lost_at - frozen_at,
        next.entered - lost_at
    );
    assert!(
        next.token > lease.token(),
        "token {} not above {}",
        next.token,
        lease.token()
    );
    history.record(next);
    assert_eq!(history.check(), Vec::new(), "sections overlap");
}

/// Found by the chaos run (`mysql_for_update::chaos`): a renewal dropped while
/// its keepalive waited on a frozen server (the watchdog drops it when the
/// lease is released) left that reply on the wire, and the release's `ROLLBACK`
/// read it as its own; sqlx panicked decoding it. The release must wait for
/// the keepalive and succeed.
#[tokio::test(flavor = "multi_thread")]
async fn a_keepalive_cut_short_leaves_the_held_connection_in_step() {
    let server = server().await;
    let lock = client(&server, Strategy::ForUpdate, "keepalive_cut").await;
    let key = LockKey::new("cut").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .renewal(Renewal::Manual);
    let lease = lock.acquire(&key, &opts).await.unwrap();

    server.pause().unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(300), lease.renew()).await;
    assert!(
        cut.is_err(),
        "a frozen server answered the keepalive: {cut:?}"
    );
    server.resume().unwrap();

    lease.release().await.expect("the release is read in step");
    let again = lock
        .acquire(&key, &opts.clone().wait(Wait::No))
        .await
        .expect("the lock is free after the release");
    again.release().await.unwrap();
}
