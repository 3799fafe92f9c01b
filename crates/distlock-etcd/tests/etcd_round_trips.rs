//! Costs, counted by etcd itself: RPCs per uncontended cycle, and watch events per
//! release with many waiters (no herd).

mod common;

use common::{
    connect, delta, eventually, grpc_calls, metrics, queue, raw, samples, server, unique,
};
use distlock_core::{AcquireOptions, DistributedLock, Wait};
use distlock_etcd::EtcdLock;
use distlock_testkit::cycles;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_costs_two_rpcs_the_lease_amortised() {
    const CYCLES: u64 = 50;
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "rt/").await;
    let key = unique("cycle");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // Warm-up: the lease grant, and the keep-alive and watch streams opening.
    cycles(&lock, &key, &opts, 3).await.unwrap();
    let before = metrics(etcd.addr()).await;
    cycles(&lock, &key, &opts, CYCLES as usize).await.unwrap();
    let after = metrics(etcd.addr()).await;
    let expected = BTreeMap::from([("etcdserverpb.KV/Txn".to_owned(), 2 * CYCLES)]);
    // `handled` counts finished RPCs, `started` also streams that were opened: a
    // cycle that opened a stream of its own would show in one or the other.
    for metric in ["grpc_server_handled_total", "grpc_server_started_total"] {
        let grew = delta(&grpc_calls(&before, metric), &grpc_calls(&after, metric));
        assert_eq!(grew, expected, "{metric} over {CYCLES} cycles");
    }
    assert_eq!(
        lock.backend().stats().leases_granted,
        1,
        "one lease for the client's life"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_exactly_one_of_64_waiters() {
    const WAITERS: usize = 64;
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let key = unique("herd");
    let holder = connect(&[etcd.addr()], "herd/").await;
    let held = holder.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let mut clients: Vec<Arc<EtcdLock>> = Vec::new();
    for _ in 0..WAITERS {
        clients.push(Arc::new(connect(&[etcd.addr()], "herd/").await));
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, waiter_key, order) = (client.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(120)));
            let lease = client.acquire(&waiter_key, &opts).await.unwrap();
            order.lock().unwrap().push((i, lease.token()));
            lease.release().await.unwrap();
        }));
        // Queue them one by one, so arrival order is known.
        eventually(Duration::from_secs(10), "waiter queued", || async {
            queue(&raw, "herd/", &key).await.len() == i + 2
        })
        .await;
    }
    let events_before = samples(
        &metrics(etcd.addr()).await,
        "etcd_debugging_mvcc_events_total",
    );
    held.release().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .unwrap()
            .unwrap();
    }
    let events_after = samples(
        &metrics(etcd.addr()).await,
        "etcd_debugging_mvcc_events_total",
    );

    // Each waiter was woken exactly once: by the deletion of the key just before it.
    for (i, client) in clients.iter().enumerate() {
        assert_eq!(
            client.backend().stats().waiter_wakeups,
            1,
            "waiter {i} woken a wrong number of times"
        );
    }
    assert_eq!(holder.backend().stats().waiter_wakeups, 0);
    // FIFO, with tokens rising from holder to holder.
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..WAITERS).collect::<Vec<_>>()
    );
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens not rising: {order:?}"
    );
    // The server agrees: per release at most one waiter's watch fires, plus the
    // releasing holder's own loss watch if its cancel was still in flight. A herd
    // would send about WAITERS²/2 events.
    let sent = events_after.values().sum::<f64>() - events_before.values().sum::<f64>();
    let releases = (WAITERS + 1) as f64;
    assert!(
        sent >= WAITERS as f64 && sent <= 2.0 * releases,
        "{sent} watch events for {releases} releases"
    );
    assert!(
        queue(&raw, "herd/", &key).await.is_empty(),
        "keys left in the queue"
    );
}
