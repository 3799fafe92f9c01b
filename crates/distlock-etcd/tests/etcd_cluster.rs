//! A three-member cluster losing its leader while a lock is held.

mod common;

use common::{cluster, connect, queue, raw, unique};
use distlock_core::{AcquireOptions, DistributedLock, Wait};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_survives_a_leader_kill_and_acquires_work_after_the_election() {
    let etcd = cluster(3).await;
    let addrs: Vec<SocketAddr> = etcd.members().iter().map(|m| m.addr()).collect();
    let holder = connect(&addrs, "cluster/").await;
    let contender = connect(&addrs, "cluster/").await;
    let key = unique("through-election");
    // Long enough to outlast an election (1 s timeout here), short enough to need
    // renewals through it.
    let ttl = Duration::from_secs(5);
    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let lease_id = queue(&raw(&addrs).await, "cluster/", &key).await[0].lease();

    let leader = etcd.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    etcd.members()[leader].kill();
    let killed_at = Instant::now();
    let new_leader = etcd.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    assert_ne!(new_leader, leader);
    let survivors: Vec<SocketAddr> = addrs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, a)| *a)
        .collect();
    let raw = raw(&survivors).await;

    // Held across the election and for two more ttls: renewals reach the new
    // leader, and the key and its lease stay.
    let lost = lease.lost();
    tokio::pin!(lost);
    let opts = AcquireOptions::new().ttl(ttl).wait(Wait::No);
    while killed_at.elapsed() < ttl * 3 {
        assert!(
            lease.is_held(),
            "lease dropped {:?} after the leader was killed",
            killed_at.elapsed()
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut lost)
                .await
                .is_err(),
            "lost() fired"
        );
        if let Ok(taken) = contender.try_acquire(&key, &opts).await {
            assert!(
                taken.is_none(),
                "a contender got a held lock after the election"
            );
        }
    }
    let remaining = raw
        .lease_client()
        .time_to_live(lease_id)
        .await
        .unwrap()
        .ttl();
    assert!(remaining > 0, "the lease is gone from the cluster");
    let queued = queue(&raw, "cluster/", &key).await;
    assert_eq!(
        queued.first().map(|kv| kv.create_revision().unsigned_abs()),
        Some(lease.token().get())
    );

    // New acquires work, and tokens keep rising across the leader change.
    let other = unique("after-election");
    let fresh = contender
        .acquire(
            &other,
            &AcquireOptions::new().wait(Wait::For(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    assert!(fresh.token() > lease.token());
    fresh.release().await.unwrap();
    let token = lease.token();
    lease.release().await.unwrap();
    let next = contender
        .acquire(
            &key,
            &AcquireOptions::new().wait(Wait::For(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    assert!(next.token() > token);
    next.release().await.unwrap();
}
