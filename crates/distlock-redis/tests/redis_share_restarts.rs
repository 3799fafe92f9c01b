//! Semaphore permits and read-write lock shares across a Redis restart, as
//! `redis_restarts.rs` checks the lock (whose detection case holds a permit and
//! a share too): a real `redis-server` is restarted under held permits and
//! shares; the check reads them (only a server that lost them revokes them),
//! and with a restart guard nobody else gets in before the holders know.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    DETECTION_BOUND, LONG_TTL, admin, after, aof_server, command_calls, connect, crash_and_restart,
    eventually, guarded_pair, lost_in_time, opts, permit_and_share, raw, refused_then_granted_by,
    revoked_within, server, watch_loss,
};
use distlock_core::{DistributedLock, Held, LockError, LockKey, SingleLease, Wait};
use distlock_redis::LockKeys;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_keeps_the_data_keeps_the_permit_and_the_share() {
    let server = aof_server().await;
    let key = LockKey::new("restart/kept").unwrap();
    let lock = connect(&server.url()).await;
    let (permit, share) = permit_and_share(&lock, &key, true).await;
    server.restart().await.unwrap();
    let mut conn = admin(&server).await;
    // The restarted server counts from zero: one member read per set means
    // the check ran and looked at both.
    eventually(DETECTION_BOUND, "the restart check read both sets", || {
        let mut conn = conn.clone();
        async move { command_calls(&mut conn).await.get("zmscore") == Some(&2) }
    })
    .await;
    assert!(permit.is_held(), "a permit the server kept must stay held");
    assert!(share.is_held(), "a share the server kept must stay held");
    permit.release().await.unwrap();
    share.release().await.unwrap();
    let calls = command_calls(&mut conn).await;
    assert_eq!(calls.get("zmscore"), Some(&2), "{calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_restart_guard_nobody_takes_a_permit_or_a_share_before_the_holders_know() {
    const GUARD: Duration = Duration::from_secs(3);
    let server = server().await;
    let (a, b) = guarded_pair(&server, GUARD).await;
    let (a_sem, a_rw) = (a.semaphore().unwrap(), a.rwlock().unwrap());
    let (b_sem, b_rw) = (b.semaphore().unwrap(), b.rwlock().unwrap());
    let key = LockKey::new("restart/guard").unwrap();
    // A server that just started may have lost permits a previous process
    // granted: it refuses until it has been up for the guard.
    let refused = a_sem.acquire(&key, 1, &opts(GUARD, Wait::No)).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    let refused = a_rw.read(&key, &opts(GUARD, Wait::No)).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    let wait = Wait::For(GUARD * 3);
    let permit = a_sem.acquire(&key, 1, &opts(GUARD, wait)).await.unwrap();
    let share = a_rw.read(&key, &opts(GUARD, wait)).await.unwrap();
    let (permit_lost, share_lost) = (watch_loss(permit.lease()), watch_loss(share.lease()));
    let (killed_at, back_at) = crash_and_restart(&server).await;
    // The only permit, and the write share: without the guard both would be
    // granted at once by the emptied server.
    let (b_sem, b_rw, key) = (&b_sem, &b_rw, &key);
    let ((_, b_permit, permit_at), (_, b_share, share_at)) = tokio::join!(
        refused_then_granted_by(GUARD * 3, |wait| async move {
            b_sem.acquire(key, 1, &opts(GUARD, wait)).await
        }),
        refused_then_granted_by(GUARD * 3, |wait| async move {
            b_rw.write(key, &opts(GUARD, wait)).await
        }),
    );
    let permit_lost_at = lost_in_time(permit_lost, back_at, permit_at, DETECTION_BOUND).await;
    let share_lost_at = lost_in_time(share_lost, back_at, share_at, DETECTION_BOUND).await;
    println!(
        "guard {GUARD:?}: A's permit lost {} and its read share {} after the server answered \
         again; B's permit granted {} and its write share {} after the kill",
        after(permit_lost_at, back_at),
        after(share_lost_at, back_at),
        after(permit_at, killed_at),
        after(share_at, killed_at)
    );
    // The server started after the kill, and counts the guard from its start.
    for granted_at in [permit_at, share_at] {
        assert!(
            granted_at - killed_at >= GUARD,
            "B got in {:?} after the kill, inside the guard",
            granted_at - killed_at
        );
    }
    assert!(b_permit.token() > permit.token());
    assert!(b_share.token() > share.token());
    b_permit.release().await.unwrap();
    b_share.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_refuses_permit_and_share_ttls_longer_than_itself() {
    let server = server().await;
    let lock = connect(&format!("{}?restart_guard=2s&ttl=1s", server.url())).await;
    let (sem, rw) = (lock.semaphore().unwrap(), lock.rwlock().unwrap());
    let key = LockKey::new("restart/ttl").unwrap();
    let too_long = opts(Duration::from_secs(3), Wait::No);
    let refusals = [
        sem.acquire(&key, 3, &too_long).await.map(drop),
        rw.read(&key, &too_long).await.map(drop),
        rw.write(&key, &too_long).await.map(drop),
    ];
    for refused in refusals {
        assert!(
            matches!(&refused, Err(LockError::InvalidOptions { reason }) if reason.contains("restart guard")),
            "{refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_server_refuses_leaves_the_other_leases_checked() {
    let server = server().await;
    let mut conn = admin(&server).await;
    // Without INFO the client knows no run_id, so every reconnection checks
    // every lease; without ZMSCORE the permits and shares cannot be read.
    let acl = [
        "ACL",
        "SETUSER",
        "nozmscore",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
    ];
    let _: String = raw(&mut conn, &[&acl[..], &["-info", "-zmscore"]].concat()).await;
    let lock = connect(&format!(
        "redis://nozmscore:pw@127.0.0.1:{}/0",
        server.port()
    ))
    .await;
    let key = LockKey::new("restart/refused").unwrap();
    let lease = lock.acquire(&key, &opts(LONG_TTL, Wait::No)).await.unwrap();
    let (permit, share) = permit_and_share(&lock, &key, false).await;
    let (lease_lost, permit_lost) = (watch_loss(&lease), watch_loss(permit.lease()));
    // The lock deleted behind its holder's back, then the client's connections
    // cut: the reconnection checks, and only the lock can be read.
    let lock_key = LockKeys::new("distlock:", &key).lock;
    let _: i64 = raw(&mut conn, &["DEL", &lock_key]).await;
    let _: i64 = raw(&mut conn, &["CLIENT", "KILL", "USER", "nozmscore"]).await;
    revoked_within(lease_lost, DETECTION_BOUND).await;
    // The check that found the lock gone could not read the permit and the
    // share: they stay held (their renewals would notice a real loss).
    let permit_fired = tokio::time::timeout(Duration::from_millis(200), permit_lost).await;
    assert!(
        permit_fired.is_err(),
        "the unreadable permit was reported lost"
    );
    assert!(permit.is_held() && share.is_held());
}
