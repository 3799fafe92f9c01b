//! Nothing leaks over contended acquire/release cycles per strategy (2,000,
//! or `DISTLOCK_LEAK_CYCLES`; `just leaks` runs 10,000) with
//! cancelled acquires among them: not the client's file
//! descriptors, not the server's connections, not a lock row or a queued
//! session.
//!
//! The only tests of their binary, and run one at a time (they count this
//! process's descriptors and the server's connections).
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, LockKey, Wait};
use distlock_mysql::Strategy;
use distlock_testkit::History;
use distlock_testkit::servers::MariaDbServer;
use distlock_testkit::support::leak_cycles;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{client, eventually, root_value};
use tokio::sync::{Mutex, OnceCell};

/// Completed acquire/release cycles per strategy, over all clients.
const CLIENTS: usize = 4;
const KEYS: usize = 3;
/// Every this many attempts of a client is cancelled after 1 to 4 ms: while it
/// connects, while its statement is in flight, or while it waits.
const CANCEL_EVERY: usize = 5;

/// One server and one test at a time for this binary.
async fn server() -> &'static MariaDbServer {
    static SERVER: OnceCell<MariaDbServer> = OnceCell::const_new();
    SERVER.get_or_init(support::server).await
}
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The server's client connections (the root client asking counts itself).
async fn threads_connected(server: &MariaDbServer) -> i64 {
    let value = root_value(server, "SHOW GLOBAL STATUS LIKE 'Threads_connected';").await;
    value.parse().unwrap()
}

/// Rows of `table` with an owner, read uncommitted (a `for_update` holder's tag
/// counts too).
async fn owned_rows(server: &MariaDbServer, table: &str) -> String {
    let sql = format!(
        "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; \
         SELECT COUNT(*) FROM distlock.`{table}` WHERE owner IS NOT NULL;"
    );
    root_value(server, &sql).await
}

/// The shared state of one run: the hot keys, what happened, and how far it got.
struct Churn {
    keys: Vec<LockKey>,
    history: History,
    done: AtomicUsize,
    cancelled: AtomicUsize,
    cycles: usize,
}

impl Churn {
    /// One client's share, until the run has its cycles: acquire a hot key,
    /// record the section, release. Every `CANCEL_EVERY`th acquire is given up
    /// after 1 to 4 ms, the others wait up to 20 s.
    async fn run(&self, client: usize, lock: &DynLock) {
        let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(20)));
        let mut attempt = 0;
        while self.done.load(Ordering::Relaxed) < self.cycles {
            attempt += 1;
            let key = &self.keys[(attempt * 7 + client) % self.keys.len()];
            let patience = match attempt % CANCEL_EVERY {
                0 => Duration::from_millis(1 + ((attempt + client) % 4) as u64),
                _ => Duration::from_secs(30),
            };
            let Ok(acquired) = tokio::time::timeout(patience, lock.acquire(key, &opts)).await
            else {
                self.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let lease = acquired.unwrap();
            let entered = Instant::now();
            tokio::task::yield_now().await;
            self.history.record_lease(client, &lease, entered);
            lease.release().await.unwrap();
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn no_leaks_over(strategy: Strategy, cycles: usize) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = server().await;
    let table = format!("leaks_{}", strategy.as_str());
    let inspector = client(server, strategy, &table).await;
    let inspect = inspector.inspect().unwrap();
    // Opens the inspector's connection, so it is part of every count below.
    assert_eq!(inspect.residue("").await.unwrap(), Vec::<String>::new());
    let fds_before = open_fds();
    let threads_before = threads_connected(server).await;

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(server, strategy, &table).await);
    }
    let churn = Arc::new(Churn {
        keys: (0..KEYS)
            .map(|k| LockKey::new(format!("hot-{k}")).unwrap())
            .collect(),
        history: History::new(),
        done: AtomicUsize::new(0),
        cancelled: AtomicUsize::new(0),
        cycles,
    });
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, lock)| {
            let (churn, lock) = (churn.clone(), lock.clone());
            tokio::spawn(async move { churn.run(i, &lock).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let took = started.elapsed();
    let completed = churn.done.load(Ordering::Relaxed);
    let cancelled = churn.cancelled.load(Ordering::Relaxed);
    let threads_busy = threads_connected(server).await;
    println!(
        "{}: {completed} cycles and {cancelled} cancelled acquires in {took:?}; \
         {threads_busy} server connections at the end",
        strategy.as_str()
    );
    assert!(completed >= cycles);
    assert!(cancelled > 0, "no acquire was cancelled");
    assert_eq!(
        churn.history.check(),
        Vec::new(),
        "mutual exclusion or token order"
    );

    // Cancelled acquires clean up in the background.
    eventually(Duration::from_secs(10), "no residue", async || {
        inspect.residue("").await.unwrap().is_empty()
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "no row with an owner",
        async || owned_rows(server, &table).await == "0",
    )
    .await;

    drop(clients);
    eventually(
        Duration::from_secs(10),
        "descriptors back once the clients are dropped",
        async || open_fds() == fds_before,
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "server connections back once the clients are dropped",
        async || threads_connected(server).await == threads_before,
    )
    .await;
    println!(
        "{}: {fds_before} descriptors and {threads_before} server connections before the \
         clients, the same after; in all {:?}",
        strategy.as_str(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_cas_leaks_nothing() {
    no_leaks_over(Strategy::VersionCas, leak_cycles()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_insert_leaks_nothing() {
    no_leaks_over(Strategy::UniqueInsert, leak_cycles()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_update_leaks_nothing() {
    no_leaks_over(Strategy::ForUpdate, leak_cycles()).await;
}
