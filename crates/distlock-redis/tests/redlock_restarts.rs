//! Redlock nodes that restart empty under a held lease: with the delayed-restart
//! rule (by hand, or enforced by each node's restart guard) nobody else gets
//! in; without it a second holder gets in, and the overlap is only the time the
//! first holder needs to notice.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    DETECTION_BOUND, after, crash_and_restart, lost_in_time, overlap_with, refused_then_granted,
    servers, watch_loss,
};
use distlock_core::{AcquireOptions, DistributedLock, Lease, LockKey, Wait};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::servers::{RedisOptions, RedisServer};
use std::time::{Duration, Instant};

async fn five() -> Vec<RedisServer> {
    servers(5, RedisOptions::default()).await
}

async fn connect(nodes: &[RedisServer], guard: Option<Duration>) -> Redlock {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let mut config = RedlockConfig::from_urls(&urls).unwrap();
    if let Some(guard) = guard {
        config = config
            .restart_guard(guard)
            .defaults(distlock_core::AcquireOptions::new().ttl(guard));
    }
    config.connect().await.unwrap()
}

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(wait)
}

/// Holder A on exactly nodes 0, 1, 2 (3 and 4 were down when it acquired).
async fn hold_on_a_bare_majority(
    nodes: &[RedisServer],
    a: &Redlock,
    key: &LockKey,
    ttl: Duration,
) -> Lease {
    nodes[3].kill();
    nodes[4].kill();
    let lease = a.acquire(key, &opts(ttl, Wait::No)).await.unwrap();
    nodes[3].restart().await.unwrap();
    nodes[4].restart().await.unwrap();
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_after_the_max_ttl_never_makes_a_second_holder() {
    let nodes = five().await;
    let (a, b) = (connect(&nodes, None).await, connect(&nodes, None).await);
    let key = LockKey::new("delayed-restart").unwrap();
    let ttl = Duration::from_millis(1000);
    let lease = hold_on_a_bare_majority(&nodes, &a, &key, ttl).await;
    let a_lost = watch_loss(&lease);
    // Node 2 crashes and, following the rule, stays down longer than the max ttl.
    nodes[2].kill();
    let contender = tokio::spawn(async move {
        let won = b
            .acquire(&key, &opts(ttl, Wait::For(Duration::from_secs(20))))
            .await;
        (Instant::now(), won)
    });
    tokio::time::sleep(ttl + ttl / 2).await;
    nodes[2].restart().await.unwrap();
    let (b_at, b_lease) = contender.await.unwrap();
    let b_lease = b_lease.expect("B acquires once A's keys expire");
    let (reason, a_lost_at) = tokio::time::timeout(ttl, a_lost)
        .await
        .expect("A lost its lease")
        .unwrap();
    assert!(
        a_lost_at <= b_at,
        "B acquired while A still held ({reason:?})"
    );
    assert!(
        b_lease.token() > lease.token(),
        "{} after {}",
        b_lease.token(),
        lease.token()
    );
    b_lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_delay_rule_an_immediate_empty_restart_lets_a_second_holder_in_until_the_first_notices()
 {
    let nodes = five().await;
    let (a, b) = (connect(&nodes, None).await, connect(&nodes, None).await);
    let key = LockKey::new("immediate-restart").unwrap();
    let ttl = Duration::from_secs(30);
    let lease = hold_on_a_bare_majority(&nodes, &a, &key, ttl).await;
    let a_lost = watch_loss(&lease);
    // No persistence: node 2's key and counter are gone.
    let (_, back_at) = crash_and_restart(&nodes[2]).await;
    let second = b
        .acquire(&key, &opts(ttl, Wait::No))
        .await
        .expect("nodes 2, 3, 4 are free");
    let b_at = Instant::now();
    // A keeps only 2 of 5 nodes: it finds out from node 2's new run_id, long
    // before its ttl/3 renewal.
    let (a_lost_at, overlap) = overlap_with(a_lost, b_at).await;
    println!(
        "redlock, no guard: B acquired {} after node 2 answered, A lost {} after that; overlap {overlap:?}",
        after(b_at, back_at),
        after(a_lost_at, b_at)
    );
    // The restarted counter was re-seeded from the clock, so the second holder's
    // token is higher and a fence refuses the first holder's late writes.
    assert!(
        second.token() > lease.token(),
        "{} vs {}",
        second.token(),
        lease.token()
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_restart_guard_a_node_restarted_at_once_lets_nobody_in_before_the_holder_knows() {
    const GUARD: Duration = Duration::from_secs(2);
    let nodes = five().await;
    let (a, b) = (
        connect(&nodes, Some(GUARD)).await,
        connect(&nodes, Some(GUARD)).await,
    );
    // Fresh nodes refuse until they have been up for the guard.
    let warm_up = LockKey::new("warm-up").unwrap();
    a.acquire(&warm_up, &opts(GUARD, Wait::For(GUARD * 4)))
        .await
        .expect("granted once the nodes have been up for the guard")
        .release()
        .await
        .unwrap();
    let key = LockKey::new("guarded-restart").unwrap();
    let lease = hold_on_a_bare_majority(&nodes, &a, &key, GUARD).await;
    let a_lost = watch_loss(&lease);
    let (_, back_at) = crash_and_restart(&nodes[2]).await;
    // Nodes 2, 3 and 4 are free of A's key, but each came back within the guard.
    let (_, second, b_at) = refused_then_granted(&b, &key, GUARD, GUARD * 4).await;
    let a_lost_at = lost_in_time(a_lost, back_at, b_at, DETECTION_BOUND).await;
    println!(
        "redlock, guard {GUARD:?}: A lost {} after node 2 answered, B acquired {} after that",
        after(a_lost_at, back_at),
        after(b_at, back_at)
    );
    assert!(second.token() > lease.token());
    second.release().await.unwrap();
}
