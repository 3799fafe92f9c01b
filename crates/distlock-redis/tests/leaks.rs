//! Nothing leaks under churn: acquire/release cycles (2,000, or
//! `DISTLOCK_LEAK_CYCLES`; `just leaks` runs 10,000) by several clients
//! on a few keys, with acquires dropped mid-wait, leave no lock key, no stray
//! key, no connection on the server and no file descriptor in the process once
//! the clients are dropped. Alone in its binary, so that no other test opens
//! descriptors meanwhile.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, eventually, raw, server};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::support::leak_cycles;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const TASKS_PER_CLIENT: usize = 3;
const KEYS: usize = 3;
/// Every this many attempts a task gives up on its acquire almost at once.
const CANCEL_EVERY: u64 = 4;
const TTL: Duration = Duration::from_secs(2);
const NAMESPACE: &str = "leaks:";

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("procfs").count()
}

async fn connected_clients(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = raw(conn, &["INFO", "clients"]).await;
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients has connected_clients")
}

#[derive(Default)]
struct Counts {
    cycles: AtomicU64,
    cancelled: AtomicU64,
}

/// Acquires and releases keys in turn until the clients together did the run's cycles;
/// every `CANCEL_EVERY`th attempt is dropped after 2 ms, mid-wait when the key
/// is held.
async fn churn(lock: Arc<RedisLock>, task: usize, counts: Arc<Counts>) {
    let wait = AcquireOptions::new()
        .ttl(TTL)
        .wait(Wait::For(Duration::from_secs(30)));
    let mut attempt = 0_u64;
    let cycles = leak_cycles() as u64;
    while counts.cycles.load(Ordering::SeqCst) < cycles {
        attempt += 1;
        let key = LockKey::new(format!("k{}", (task + attempt as usize) % KEYS)).unwrap();
        if attempt.is_multiple_of(CANCEL_EVERY) {
            let dropped = tokio::time::timeout(Duration::from_millis(2), lock.acquire(&key, &wait));
            match dropped.await {
                Err(_) => counts.cancelled.fetch_add(1, Ordering::SeqCst),
                Ok(lease) => {
                    lease.unwrap().release().await.unwrap();
                    counts.cycles.fetch_add(1, Ordering::SeqCst)
                }
            };
            continue;
        }
        let lease = lock.acquire(&key, &wait).await.unwrap();
        tokio::task::yield_now().await;
        // A lease lost under churn (its key taken by another client) would fail
        // here with `Lost`.
        lease.release().await.expect("released while held");
        counts.cycles.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_with_cancellations_leaves_nothing_behind() {
    let started = Instant::now();
    let server = server().await;
    let mut conn = admin(&server).await;
    let fds_before = open_fds();
    let clients_before = connected_clients(&mut conn).await;
    let url = format!(
        "{}?namespace={NAMESPACE}&ttl=2s&restart_guard=2s",
        server.url()
    );
    let mut locks = Vec::new();
    for _ in 0..CLIENTS {
        locks.push(Arc::new(
            RedisConfig::from_url(&url)
                .unwrap()
                .connect()
                .await
                .unwrap(),
        ));
    }
    // The server just started: the restart guard holds every lock for a while.
    let warm_up = LockKey::new("k0").unwrap();
    let wait = AcquireOptions::new()
        .ttl(TTL)
        .wait(Wait::For(Duration::from_secs(10)));
    locks[0]
        .acquire(&warm_up, &wait)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let counts = Arc::new(Counts::default());
    let churning = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, lock) in locks.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            tasks.spawn(churn(
                lock.clone(),
                i * TASKS_PER_CLIENT + t,
                counts.clone(),
            ));
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let churned = churning.elapsed();
    let fds_peak = open_fds();

    // Undo of a cancelled acquire that won runs in the background.
    let inspector = locks[0].inspect().expect("Inspect");
    eventually(Duration::from_secs(10), "no lock key left", || async {
        inspector.residue("").await.unwrap().is_empty()
    })
    .await;
    let mut keys: Vec<String> = raw(&mut conn, &["KEYS", "*"]).await;
    keys.sort();
    let expected: Vec<String> = (0..KEYS)
        .map(|k| format!("{NAMESPACE}{{k{k}}}:fence"))
        .chain([
            format!("{NAMESPACE}restart-guard"),
            format!("{NAMESPACE}high-water"),
        ])
        .collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(
        keys, expected_sorted,
        "only fence counters (collected after state_ttl), the guard marker and the high-water"
    );

    drop(locks);
    eventually(
        Duration::from_secs(10),
        "server connections back to the start",
        || {
            let mut conn = conn.clone();
            async move { connected_clients(&mut conn).await == clients_before }
        },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "file descriptors back to the start",
        || async { open_fds() == fds_before },
    )
    .await;
    println!(
        "leaks: {} cycles + {} cancelled acquires by {} tasks on {KEYS} keys in {churned:?}; \
         fds {fds_before} -> {fds_peak} -> {}, server clients {clients_before} -> {}; total {:?}",
        counts.cycles.load(Ordering::SeqCst),
        counts.cancelled.load(Ordering::SeqCst),
        CLIENTS * TASKS_PER_CLIENT,
        open_fds(),
        connected_clients(&mut conn).await,
        started.elapsed()
    );
}
