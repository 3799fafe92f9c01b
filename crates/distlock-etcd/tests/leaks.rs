//! Nothing leaks over contended acquire/release cycles (2,000, or
//! `DISTLOCK_LEAK_CYCLES`; `just leaks` runs 10,000) with cancelled
//! acquires among them: not the client's file descriptors, not etcd's watch or
//! keep-alive streams, watchers or leases, not a key under the namespace.
//!
//! The only test of its binary, so no other test opens descriptors in this
//! process while it counts them.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up: a failure here fails the test"
)]

mod common;

use common::{connect, eventually, grpc_calls, metrics, raw, samples, server};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_etcd::EtcdLock;
use distlock_etcd::client::GetOptions;
use distlock_testkit::History;
use distlock_testkit::support::leak_cycles;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const TASKS_PER_CLIENT: usize = 2;
const KEYS: usize = 3;
/// Completed acquire/release cycles, over all tasks.
/// Every this many attempts of a task is cancelled mid-wait.
const CANCEL_EVERY: usize = 4;
/// Above etcd's minimum (2 s with the launcher's 1 s election timeout), with room
/// for keep-alives answered late on a busy 2-core machine.
const TTL: Duration = Duration::from_secs(5);
const NAMESPACE: &str = "leaks/";
/// How long a count may take to settle: a lease left to expire lives out its
/// ttl, an idle watch lingers 2 s.
const SETTLE: Duration = Duration::from_secs(20);

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// What may leak, counted by the process and by etcd itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Levels {
    fds: usize,
    /// Leases etcd knows (`LeaseLeases`).
    leases: usize,
    /// Keys under the namespace.
    keys: i64,
    /// Watch streams open on the server: gRPC `Watch` calls started, not handled.
    watch_streams: u64,
    /// Keep-alive streams open on the server, counted the same way.
    keep_alive_streams: u64,
    /// etcd's own gauges of watch streams and watchers.
    mvcc_watch_streams: i64,
    mvcc_watchers: i64,
}

fn open_streams(text: &str, method: &str) -> u64 {
    let started = grpc_calls(text, "grpc_server_started_total");
    let handled = grpc_calls(text, "grpc_server_handled_total");
    let count =
        |calls: &std::collections::BTreeMap<String, u64>| calls.get(method).copied().unwrap_or(0);
    count(&started).saturating_sub(count(&handled))
}

fn gauge(text: &str, metric: &str) -> i64 {
    samples(text, metric).values().sum::<f64>() as i64
}

/// The levels now. The `/metrics` request's socket is closed before the
/// descriptors are counted.
async fn levels(addr: SocketAddr, admin: &distlock_etcd::client::Client) -> Levels {
    let text = metrics(addr).await;
    let leases = admin.lease_client().leases().await.unwrap().len();
    let keys = admin
        .kv_client()
        .get(
            NAMESPACE,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap()
        .count();
    Levels {
        fds: open_fds(),
        leases,
        keys,
        watch_streams: open_streams(&text, "etcdserverpb.Watch/Watch"),
        keep_alive_streams: open_streams(&text, "etcdserverpb.Lease/LeaseKeepAlive"),
        mvcc_watch_streams: gauge(&text, "etcd_debugging_mvcc_watch_stream_total"),
        mvcc_watchers: gauge(&text, "etcd_debugging_mvcc_watcher_total"),
    }
}

/// Polls until the levels are `expected`, failing with both after `SETTLE`.
async fn settle(
    addr: SocketAddr,
    admin: &distlock_etcd::client::Client,
    expected: Levels,
    when: &str,
) {
    let asked = Instant::now();
    let deadline = asked + SETTLE;
    loop {
        let now = levels(addr, admin).await;
        if now == expected {
            println!("{when}: {now:?} after {:?}", asked.elapsed());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: not back within {SETTLE:?}\nexpected {expected:?}\nfound    {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One task's share of the run: acquire a key, record the section, release;
/// every `CANCEL_EVERY`th acquire is dropped after 1 to 4 ms, usually while it
/// waits in line or while its enqueue is in flight.
async fn churn(
    task: usize,
    lock: Arc<EtcdLock>,
    keys: Arc<Vec<LockKey>>,
    history: Arc<History>,
    done: Arc<AtomicUsize>,
) -> usize {
    let opts = AcquireOptions::new()
        .ttl(TTL)
        .wait(Wait::For(Duration::from_secs(30)));
    let (mut cancelled, mut attempt) = (0, 0);
    let cycles = leak_cycles();
    while done.load(Ordering::Relaxed) < cycles {
        attempt += 1;
        let key = &keys[(attempt * 7 + task) % keys.len()];
        let lease = if attempt % CANCEL_EVERY == 0 {
            let patience = Duration::from_millis(1 + ((attempt + task) % 4) as u64);
            match tokio::time::timeout(patience, lock.acquire(key, &opts)).await {
                Ok(lease) => lease.unwrap(),
                Err(_) => {
                    cancelled += 1;
                    continue;
                }
            }
        } else {
            lock.acquire(key, &opts).await.unwrap()
        };
        history.record_lease(task, &lease, Instant::now());
        // A lease lost under churn would fail here with `Lost`.
        lease.release().await.unwrap();
        done.fetch_add(1, Ordering::Relaxed);
    }
    cancelled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaks_no_descriptor_stream_watcher_lease_or_key() {
    let started = Instant::now();
    let etcd = server().await;
    let addr = etcd.addr();
    let admin = raw(&[addr]).await;
    // The admin's connection is open from its first request on.
    let without_clients = levels(addr, &admin).await;
    assert_eq!(without_clients.keys, 0);

    let keys: Arc<Vec<LockKey>> = Arc::new(
        (0..KEYS)
            .map(|k| LockKey::new(format!("hot-{k}")).unwrap())
            .collect(),
    );
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let lock = Arc::new(connect(&[addr], NAMESPACE).await);
        // Everything a client keeps exists from here on: its lease for the ttl,
        // the keep-alive stream and the watch stream, opened by the first key
        // watched (a lock's key is, once held past its grace).
        let opts = AcquireOptions::new().ttl(TTL);
        let held = lock.acquire(&keys[0], &opts).await.unwrap();
        eventually(Duration::from_secs(10), "the held key watched", || async {
            lock.backend().stats().held_watches == 1
        })
        .await;
        held.release().await.unwrap();
        clients.push(lock);
    }
    // The connect probe's 1 s lease is revoked (or expires); idle watches end
    // after their linger.
    let with_clients = Levels {
        fds: open_fds(),
        leases: without_clients.leases + CLIENTS,
        keys: 0,
        watch_streams: without_clients.watch_streams + CLIENTS as u64,
        keep_alive_streams: without_clients.keep_alive_streams + CLIENTS as u64,
        mvcc_watch_streams: without_clients.mvcc_watch_streams + CLIENTS as i64,
        mvcc_watchers: without_clients.mvcc_watchers,
    };
    assert!(
        with_clients.fds > without_clients.fds,
        "the clients opened no connection"
    );
    settle(
        addr,
        &admin,
        with_clients,
        "with the clients, before the churn",
    )
    .await;

    let (history, done) = (Arc::new(History::new()), Arc::new(AtomicUsize::new(0)));
    let churning = Instant::now();
    let mut tasks = Vec::new();
    for (c, lock) in clients.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            tasks.push(tokio::spawn(churn(
                c * TASKS_PER_CLIENT + t,
                lock.clone(),
                keys.clone(),
                history.clone(),
                done.clone(),
            )));
        }
    }
    let mut cancelled = 0;
    for task in tasks {
        cancelled += task.await.unwrap();
    }
    let churned = churning.elapsed();
    let cycles = done.load(Ordering::Relaxed);
    assert!(cycles >= leak_cycles());
    assert!(cancelled > 0, "no acquire was cancelled");
    assert_eq!(
        history.check(),
        Vec::new(),
        "mutual exclusion or token order"
    );
    let leases_granted: u64 = clients
        .iter()
        .map(|lock| lock.backend().stats().leases_granted)
        .sum();

    // A cancelled acquire's cleanup runs in the background, an idle watch
    // lingers, and a lease tainted by a cleanup that failed lives out its ttl.
    settle(
        addr,
        &admin,
        with_clients,
        "with the clients, after the churn",
    )
    .await;

    drop(clients);
    settle(
        addr,
        &admin,
        without_clients,
        "once the clients are dropped",
    )
    .await;
    println!(
        "leaks: {cycles} cycles and {cancelled} cancelled acquires by {} tasks on {KEYS} keys \
         in {churned:?}, {leases_granted} leases granted; total {:?}",
        CLIENTS * TASKS_PER_CLIENT,
        started.elapsed()
    );
}
