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
    // Warm-up: the lease grant and the keep-alive stream. The watch stream
    // opens with the first key watched, which a lock's key is once it has been
    // held past its grace: a cycle that slow in the count below would open it.
    cycles(&lock, &key, &opts, 3).await.unwrap();
    let held = lock.acquire(&key, &opts).await.unwrap();
    eventually(Duration::from_secs(10), "the watch stream open", || async {
        let started = grpc_calls(&metrics(etcd.addr()).await, "grpc_server_started_total");
        started
            .get("etcdserverpb.Watch/Watch")
            .is_some_and(|n| *n >= 1)
    })
    .await;
    held.release().await.unwrap();
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

/// The `KV` RPCs etcd has finished so far.
async fn kv_calls(etcd: &distlock_testkit::servers::EtcdServer) -> BTreeMap<String, u64> {
    grpc_calls(&metrics(etcd.addr()).await, "grpc_server_handled_total")
        .into_iter()
        .filter(|(method, _)| method.starts_with("etcdserverpb.KV/"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_reads_once_more_only_when_it_creates_its_watch() {
    let etcd = server().await;
    let (holder, waiter) = (
        Arc::new(connect(&[etcd.addr()], "rt/").await),
        Arc::new(connect(&[etcd.addr()], "rt/").await),
    );
    let key = unique("handoff");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(30)));
    // Warm-up on another key: the lease grants, and the keep-alive and watch streams.
    let warm = unique("warm");
    cycles(holder.as_ref(), &warm, &opts, 1).await.unwrap();
    cycles(waiter.as_ref(), &warm, &opts, 1).await.unwrap();
    let txns = |calls: &BTreeMap<String, u64>| calls.get("etcdserverpb.KV/Txn").copied();
    for round in 0..2 {
        let before = kv_calls(&etcd).await;
        let held = holder.acquire(&key, &opts).await.unwrap();
        let queued = {
            let (waiter, key, opts) = (waiter.clone(), key.clone(), opts.clone());
            tokio::spawn(async move { waiter.acquire(&key, &opts).await.unwrap() })
        };
        // The first time, the waiter creates the watch of the holder's key and
        // reads the queue once etcd has created it: three transactions so far
        // (the holder's, the waiter's enqueue, that read). The second time it gets
        // the same watch back, running since before the waiter's enqueue: no read.
        // (Counted from etcd's metrics: a read here would count too.)
        let so_far = if round == 0 { 3 } else { 2 };
        let grown = || async { txns(&delta(&before, &kv_calls(&etcd).await)) == Some(so_far) };
        eventually(Duration::from_secs(10), "waiter queued", grown).await;
        held.release().await.unwrap();
        queued.await.unwrap().release().await.unwrap();
        // Then the release, the waiter's re-check after the wake-up, its release.
        // Besides: a held key's loss watch, if the lock was held past its grace,
        // reads the key (a `Range`) when a write came before etcd created it.
        let grew = delta(&before, &kv_calls(&etcd).await);
        assert_eq!(txns(&grew), Some(so_far + 3), "round {round}: {grew:?}");
        let others = grew.iter().filter(|(method, _)| !method.ends_with("/Txn"));
        for (method, n) in others {
            assert!(
                method == "etcdserverpb.KV/Range" && *n <= 2,
                "round {round}: {grew:?}"
            );
        }
    }
}

/// The benchmarks' floor is a put-if-absent `Txn` on the client's lease and a
/// `DeleteRange`, and the server's request counter grows by exactly those
/// (plus the `MemberList` that finds the members to read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_is_one_txn_and_one_delete_and_the_counter_counts_them() {
    const CYCLES: u64 = 20;
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "floor/").await;
    let inspect = lock.inspect().unwrap();
    let key = unique("floor");
    let ttl = Duration::from_secs(30);
    // Warm-up: the lease grant and its keep-alive stream.
    inspect.floor_cycle(&key, ttl).await.unwrap();
    let before = kv_calls(&etcd).await;
    let counted_before = inspect.server_requests().await.unwrap().unwrap();
    for _ in 0..CYCLES {
        inspect.floor_cycle(&key, ttl).await.unwrap();
    }
    let counted_after = inspect.server_requests().await.unwrap().unwrap();
    let expected = BTreeMap::from([
        ("etcdserverpb.KV/DeleteRange".to_owned(), CYCLES),
        ("etcdserverpb.KV/Txn".to_owned(), CYCLES),
    ]);
    assert_eq!(delta(&before, &kv_calls(&etcd).await), expected);
    assert_eq!(counted_after - counted_before, 2 * CYCLES + 1);
    assert_eq!(
        lock.backend().stats().leases_granted,
        1,
        "the lock's own lease"
    );
    assert!(
        queue(&raw(&[etcd.addr()]).await, "floor/", &key)
            .await
            .is_empty(),
        "the floor left its key"
    );
}
