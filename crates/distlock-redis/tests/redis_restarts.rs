//! A Redis server that restarts without persistence (or fails over) forgets
//! every lock (and permit, and share). These tests kill and restart a real
//! `redis-server` under a held lease and measure how soon the holder finds out,
//! and whether anybody else can get in first: with a restart guard nobody can;
//! without it, the overlap is the time the holder needs to notice. The
//! semaphore's and the read-write lock's own cases are in
//! `redis_share_restarts.rs`.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    DETECTION_BOUND, LONG_TTL, admin, after, aof_server, connect, crash_and_restart, eventually,
    guarded_pair, lost_in_time, opts, overlap_with, permit_and_share, raw, refused_then_granted,
    revoked_within, server, servers, watch_loss,
};
use distlock_core::{DistributedLock, Held, LockError, LockKey, SingleLease, Wait};
use distlock_redis::RedisConfig;
use distlock_testkit::servers::RedisOptions;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_loses_a_lock_a_permit_and_a_share_fires_lost_long_before_the_renewal() {
    let server = server().await;
    for protocol in ["resp2", "resp3"] {
        let a = connect(&format!("{}?protocol={protocol}", server.url())).await;
        let key = LockKey::new("restart/detect").unwrap();
        let lease = a.acquire(&key, &opts(LONG_TTL, Wait::No)).await.unwrap();
        let (permit, share) = permit_and_share(&a, &key, false).await;
        let losses = [
            ("lock", watch_loss(&lease)),
            ("permit", watch_loss(permit.lease())),
            ("read share", watch_loss(share.lease())),
        ];
        let (killed_at, back_at) = crash_and_restart(&server).await;
        for (what, lost) in losses {
            let lost_at = revoked_within(lost, DETECTION_BOUND).await;
            println!(
                "detection of a {what} ({protocol}, ttl {LONG_TTL:?}): server answering {} \
                 after the kill, lost() {} after that",
                after(back_at, killed_at),
                after(lost_at, back_at)
            );
        }
        assert!(!lease.is_held() && !permit.is_held() && !share.is_held());
        assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
        assert!(matches!(
            permit.release().await,
            Err(LockError::Lost { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_guard_the_overlap_is_only_the_time_to_notice() {
    let server = server().await;
    let (a, b) = (connect(&server.url()).await, connect(&server.url()).await);
    let key = LockKey::new("restart/overlap").unwrap();
    let ttl = Duration::from_secs(15);
    let lease = a.acquire(&key, &opts(ttl, Wait::No)).await.unwrap();
    let a_lost = watch_loss(&lease);
    let (_, back_at) = crash_and_restart(&server).await;
    // Nothing stops B: the restarted server has no lock.
    let second = b
        .acquire(&key, &opts(ttl, Wait::For(Duration::from_secs(5))))
        .await
        .expect("the restarted server grants the lock");
    let b_at = Instant::now();
    let (a_lost_at, overlap) = overlap_with(a_lost, b_at).await;
    println!(
        "no guard: B acquired {} after the server answered, A lost {} after that; overlap {overlap:?}",
        after(b_at, back_at),
        after(a_lost_at, b_at)
    );
    assert!(second.token() > lease.token(), "tokens keep rising");
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_restart_guard_nobody_gets_in_before_the_holder_knows() {
    const GUARD: Duration = Duration::from_secs(3);
    let server = server().await;
    let (a, b) = guarded_pair(&server, GUARD).await;
    let key = LockKey::new("restart/guard").unwrap();
    // A server that just started may have lost locks a previous process granted:
    // it refuses until it has been up for the guard.
    let refused = a.acquire(&key, &opts(GUARD, Wait::No)).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    let lease = a
        .acquire(&key, &opts(GUARD, Wait::For(GUARD * 3)))
        .await
        .expect("granted once the server has been up for the guard");
    let a_lost = watch_loss(&lease);
    let (killed_at, back_at) = crash_and_restart(&server).await;
    let (_, second, b_at) = refused_then_granted(&b, &key, GUARD, GUARD * 3).await;
    let a_lost_at = lost_in_time(a_lost, back_at, b_at, DETECTION_BOUND).await;
    println!(
        "guard {GUARD:?}: A lost {} after the server answered again, B acquired {} after the kill",
        after(a_lost_at, back_at),
        after(b_at, killed_at)
    );
    // The server started after the kill, and counts the guard from its start.
    assert!(
        b_at - killed_at >= GUARD,
        "B got in {:?} after the kill, inside the guard",
        b_at - killed_at
    );
    assert!(second.token() > lease.token());
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_refuses_ttls_longer_than_itself() {
    let server = server().await;
    let url = format!("{}?restart_guard=2s&ttl=1s", server.url());
    let lock = connect(&url).await;
    let key = LockKey::new("restart/ttl").unwrap();
    let err = lock
        .acquire(&key, &opts(Duration::from_secs(3), Wait::No))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidOptions { reason } if reason.contains("restart guard")),
        "{err}"
    );
    let err = RedisConfig::from_url(&format!("{}?restart_guard=2s", server.url())).unwrap_err();
    assert!(
        err.to_string().contains("shorter than the default ttl"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_keeps_the_data_keeps_the_lease_and_still_guards() {
    const GUARD: Duration = Duration::from_secs(2);
    let server = aof_server().await;
    let (a, b) = guarded_pair(&server, GUARD).await;
    let key = LockKey::new("restart/kept").unwrap();
    let lease = a
        .acquire(&key, &opts(GUARD, Wait::For(GUARD * 3)))
        .await
        .unwrap();
    server.restart().await.unwrap();
    // Another key: the server kept the marker, but another process wrote it,
    // and when its leases were last renewed is unknown, so the guard starts now.
    let other = LockKey::new("restart/other").unwrap();
    let (asked_at, granted, granted_at) = refused_then_granted(&b, &other, GUARD, GUARD * 3).await;
    assert!(
        granted_at - asked_at >= GUARD,
        "granted after {:?}",
        granted_at - asked_at
    );
    // The restart check found A's key where it was: no false alarm, and the
    // renewals went on through the guard (longer than A's ttl).
    assert!(lease.is_held(), "a lease the server kept must stay held");
    granted.release().await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_guards_even_though_it_has_the_marker() {
    const GUARD: Duration = Duration::from_secs(2);
    let nodes = servers(2, RedisOptions::default()).await;
    let (primary, replica) = (&nodes[0], &nodes[1]);
    let mut replica_conn = admin(replica).await;
    let port = primary.port().to_string();
    let _: String = raw(&mut replica_conn, &["REPLICAOF", "127.0.0.1", &port]).await;
    let on_primary = connect(&format!("{}?restart_guard=2s&ttl=2s", primary.url())).await;
    let key = LockKey::new("failover/k").unwrap();
    let lease = on_primary
        .acquire(&key, &opts(GUARD, Wait::For(GUARD * 3)))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the replica has the lock and the marker",
        || {
            let mut conn = replica_conn.clone();
            async move {
                let n: i64 = raw(
                    &mut conn,
                    &["EXISTS", "distlock:restart-guard", "distlock:{failover/k}"],
                )
                .await;
                n == 2
            }
        },
    )
    .await;
    // Failover: the replica has the marker, written by the old primary.
    let _: String = raw(&mut replica_conn, &["REPLICAOF", "NO", "ONE"]).await;
    let on_replica = connect(&format!("{}?restart_guard=2s&ttl=2s", replica.url())).await;
    let other = LockKey::new("failover/other").unwrap();
    let (asked_at, granted, granted_at) =
        refused_then_granted(&on_replica, &other, GUARD, GUARD * 3).await;
    assert!(
        granted_at - asked_at >= GUARD,
        "granted after {:?}",
        granted_at - asked_at
    );
    granted.release().await.unwrap();
    lease.release().await.unwrap();
}
