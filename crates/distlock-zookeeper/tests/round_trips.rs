//! Costs counted by the server itself (`mntr`), on servers of the test's own so
//! nothing else adds to the counters: requests per uncontended cycle, and watches
//! fired per release with a long queue.

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_testkit::servers::ZooKeeperOptions;
use std::time::Duration;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(60)))
}

/// An uncontended acquire + release is three requests: create, list, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_cycle_costs_three_requests() {
    const CYCLES: i64 = 20;
    let server = common::dedicated_server(ZooKeeperOptions::default()).await;
    let lock = common::client(&server.url(), &common::namespace("rtt")).await;
    let key = LockKey::new("hot").unwrap();
    // The first cycle also creates the lock directory.
    distlock_testkit::cycles(&lock, &key, &opts(), 1)
        .await
        .unwrap();

    let before = common::counters(&server).await;
    let sent_before = lock.backend().requests_sent();
    distlock_testkit::cycles(&lock, &key, &opts(), CYCLES as usize)
        .await
        .unwrap();
    let after = common::counters(&server).await;
    let delta = |name: &str| after[name] - before[name];
    assert_eq!(
        lock.backend().requests_sent() - sent_before,
        3 * CYCLES as u64
    );
    // Writes: one create and one delete per cycle.
    assert_eq!(
        delta("zk_cnt_updatelatency"),
        2 * CYCLES,
        "writes per {CYCLES} cycles"
    );
    // Reads: the one list.
    assert_eq!(
        delta("zk_cnt_readlatency"),
        CYCLES,
        "reads per {CYCLES} cycles"
    );
    // Everything the server received: 3 per cycle, plus the second `mntr`.
    assert_eq!(
        delta("zk_packets_received"),
        3 * CYCLES + 1,
        "requests per {CYCLES} cycles"
    );
}

/// 64 waiters queue behind a holder, each watching only its predecessor. Every
/// release fires exactly one watch (the next waiter's), never a herd, and no
/// waiter watches the directory's children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_fires_one_watch_with_64_waiters() {
    const WAITERS: usize = 64;
    const RELEASES: i64 = 8;
    let server = common::dedicated_server(ZooKeeperOptions::default()).await;
    let namespace = common::namespace("herd");
    let key = LockKey::new("popular").unwrap();
    let holder = common::client(&server.url(), &namespace).await;
    let lease = holder.acquire(&key, &opts()).await.unwrap();

    let (granted, mut leases) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let (client, key, granted) = (
            common::client(&server.url(), &namespace).await,
            key.clone(),
            granted.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let lease = client.acquire(&key, &opts()).await.unwrap();
            let _ = granted.send(lease);
            // Keep the client (and its session) until the test ends.
            std::future::pending::<()>().await;
        }));
    }
    let watches = || async { common::counter(&server, "zk_watch_count").await };
    common::eventually(
        Duration::from_secs(30),
        "every waiter watches one node",
        || async { watches().await == WAITERS as i64 },
    )
    .await;

    let before = common::counters(&server).await;
    let mut current = lease;
    for _ in 0..RELEASES {
        current.release().await.unwrap();
        current = tokio::time::timeout(Duration::from_secs(10), leases.recv())
            .await
            .unwrap()
            .unwrap();
    }
    let after = common::counters(&server).await;
    let delta = |name: &str| after[name] - before[name];
    // One delete per release found watchers, and each found exactly one.
    assert_eq!(
        delta("zk_cnt_node_deleted_watch_count"),
        RELEASES,
        "deletes that fired watches"
    );
    assert_eq!(
        delta("zk_sum_node_deleted_watch_count"),
        RELEASES,
        "watches fired by {RELEASES} releases"
    );
    assert_eq!(
        delta("zk_sum_node_children_watch_count"),
        0,
        "child watches fired (a herd)"
    );
    assert_eq!(watches().await, (WAITERS - RELEASES as usize) as i64);
    current.release().await.unwrap();
    for waiter in waiters {
        waiter.abort();
    }
}

/// The benchmarks' floor is the recipe's three requests (a create, a list, a
/// delete) with nothing else, and `server_requests` reads the server's own
/// `zk_packets_received`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_is_three_requests_and_the_counter_counts_them() {
    const CYCLES: i64 = 20;
    let server = common::dedicated_server(ZooKeeperOptions::default()).await;
    let lock = common::client(&server.url(), &common::namespace("floor")).await;
    let inspect = lock.inspect().unwrap();
    let key = LockKey::new("floor").unwrap();
    let ttl = Duration::from_secs(30);
    // The first cycle also creates the lock directory.
    inspect.floor_cycle(&key, ttl).await.unwrap();
    let before = common::counters(&server).await;
    let counted_before = inspect.server_requests().await.unwrap().unwrap();
    for _ in 0..CYCLES {
        inspect.floor_cycle(&key, ttl).await.unwrap();
    }
    let counted_after = inspect.server_requests().await.unwrap().unwrap();
    let after = common::counters(&server).await;
    let delta = |name: &str| after[name] - before[name];
    assert_eq!(delta("zk_cnt_updatelatency"), 2 * CYCLES, "writes");
    assert_eq!(delta("zk_cnt_readlatency"), CYCLES, "reads");
    // The floor's requests and the second reading's own `mntr`.
    assert_eq!(counted_after - counted_before, 3 * CYCLES as u64 + 1);
    let holder = lock.inspect().unwrap().holder(&key).await.unwrap();
    assert_eq!(holder, None, "the floor left its node");
}
