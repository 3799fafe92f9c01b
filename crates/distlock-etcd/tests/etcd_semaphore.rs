//! The semaphore's costs, counted by etcd itself: RPCs per uncontended permit
//! cycle, and watch events per release with many waiters (no herd: a release
//! wakes the first waiter, its claim wakes the next, nobody else).
// Set-up helpers: a failure there fails the calling test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{connect, delta, eventually, grpc_calls, metrics, raw, samples, server, unique};
use distlock_core::{AcquireOptions, DistributedLock, DynSemaphore, Held, LockKey, Wait};
use distlock_etcd::client::GetOptions;
use distlock_etcd::{EtcdLock, semaphore_prefix};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn semaphore(lock: &EtcdLock) -> DynSemaphore {
    lock.semaphore().expect("etcd offers semaphores")
}

/// The keys under `key`'s semaphore range in `part` (`queue/`, `slots/`).
async fn keys_in(
    raw: &distlock_etcd::client::Client,
    namespace: &str,
    key: &LockKey,
    part: &str,
) -> usize {
    let prefix = [semaphore_prefix(namespace, key), part.as_bytes().to_vec()].concat();
    let found = raw
        .kv_client()
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    found.kvs().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_permit_cycle_costs_three_txns() {
    const CYCLES: u64 = 30;
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "sem-rt/").await;
    let permits = semaphore(&lock);
    let key = unique("cycle");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // Warm-up: the lease grant, the streams, and the limit stored (the first
    // enqueue finds none, stores it and enqueues again).
    for _ in 0..3 {
        permits
            .acquire(&key, 4, &opts)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let before = metrics(etcd.addr()).await;
    for _ in 0..CYCLES {
        let permit = permits.acquire(&key, 4, &opts).await.unwrap();
        assert_eq!(permit.slot(), 0, "the lowest free slot");
        permit.release().await.unwrap();
    }
    let after = metrics(etcd.addr()).await;
    // Enqueue, claim (the queue key traded for the permit key), release.
    let expected = BTreeMap::from([("etcdserverpb.KV/Txn".to_owned(), 3 * CYCLES)]);
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
async fn each_release_wakes_only_the_next_waiter() {
    const WAITERS: usize = 32;
    const LIMIT: u32 = 2;
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let key = unique("herd");
    let holder = connect(&[etcd.addr()], "sem-herd/").await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let held = [
        semaphore(&holder)
            .acquire(&key, LIMIT, &opts)
            .await
            .unwrap(),
        semaphore(&holder)
            .acquire(&key, LIMIT, &opts)
            .await
            .unwrap(),
    ];
    let mut clients: Vec<Arc<EtcdLock>> = Vec::new();
    for _ in 0..WAITERS {
        clients.push(Arc::new(connect(&[etcd.addr()], "sem-herd/").await));
    }
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (permits, waiter_key) = (semaphore(client), key.clone());
        let opts = opts.clone().wait(Wait::For(Duration::from_secs(120)));
        tasks.push(tokio::spawn(async move {
            let permit = permits.acquire(&waiter_key, LIMIT, &opts).await.unwrap();
            permit.release().await.unwrap();
        }));
        // Queue them one by one, so each is settled in its wait.
        eventually(Duration::from_secs(10), "waiter queued", || async {
            keys_in(&raw, "sem-herd/", &key, "queue/").await == i + 1
        })
        .await;
    }
    let events_before = samples(
        &metrics(etcd.addr()).await,
        "etcd_debugging_mvcc_events_total",
    );
    for permit in held {
        permit.release().await.unwrap();
    }
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

    // A waiter is woken once when the key before it is traded for a permit
    // (it becomes the first) and once when a permit is released for it; the
    // first waiter watched the slots from the start. A herd would wake every
    // waiter on every release.
    for (i, client) in clients.iter().enumerate() {
        let woken = client.backend().stats().waiter_wakeups;
        assert!((1..=2).contains(&woken), "waiter {i} woken {woken} times");
    }
    assert_eq!(holder.backend().stats().waiter_wakeups, 0);
    // The server agrees. Per permit handed over: the released permit key's
    // deletion reaches the first waiter's slot watch and its holder's own
    // lingering loss watch, and the trade's queue key deletion reaches the next
    // waiter's watch (and the lingering loss watch that key's client kept from
    // its previous permit, at most). A herd would send about WAITERS²/2.
    let sent = events_after.values().sum::<f64>() - events_before.values().sum::<f64>();
    let handovers = (WAITERS + LIMIT as usize) as f64;
    assert!(
        sent >= WAITERS as f64 && sent <= 4.0 * handovers,
        "{sent} watch events for {handovers} releases"
    );
    assert_eq!(
        keys_in(&raw, "sem-herd/", &key, "queue/").await,
        0,
        "waiting keys left"
    );
    assert_eq!(
        keys_in(&raw, "sem-herd/", &key, "slots/").await,
        0,
        "permits left"
    );
}
