//! Nothing leaks over contended acquire/release cycles (2,000, or
//! `DISTLOCK_LEAK_CYCLES`; `just leaks` runs 10,000) with cancelled
//! acquires among them: not the client's file descriptors, not the server's
//! connections or watches, not a lock node.
//!
//! The only test of its binary, so no other test opens descriptors in this
//! process while it counts them.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up: a failure here fails the test"
)]

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_testkit::History;
use distlock_testkit::servers::{ZooKeeperOptions, ZooKeeperServer};
use distlock_testkit::support::leak_cycles;
use distlock_zookeeper::ZkLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 6;
const KEYS: usize = 3;
/// Completed acquire/release cycles, over all clients.
/// Every this many attempts of a client is cancelled mid-wait.
const CANCEL_EVERY: usize = 4;

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

async fn alive_connections(server: &ZooKeeperServer) -> i64 {
    common::counter(server, "zk_num_alive_connections").await
}

/// Lock nodes under every lock directory of `namespace`, counted with a plain
/// session rather than through the adapter.
async fn lock_nodes(admin: &zookeeper_client::Client, namespace: &str) -> usize {
    let root = format!("/{namespace}");
    let Ok(dirs) = admin.list_children(&root).await else {
        return 0;
    };
    let mut nodes = 0;
    for dir in dirs {
        nodes += admin
            .list_children(&format!("{root}/{dir}"))
            .await
            .map_or(0, |children| children.len());
    }
    nodes
}

/// One client's share of the run: acquire a key, record the section, release;
/// every `CANCEL_EVERY`th acquire is dropped after 1 to 4 ms, usually while it
/// waits in line or while its create is in flight.
async fn churn(
    client: usize,
    lock: Arc<ZkLock>,
    keys: Arc<Vec<LockKey>>,
    history: Arc<History>,
    done: Arc<AtomicUsize>,
) -> usize {
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(20)));
    let mut cancelled = 0;
    let mut attempt = 0;
    let cycles = leak_cycles();
    while done.load(Ordering::Relaxed) < cycles {
        attempt += 1;
        let key = &keys[(attempt * 7 + client) % keys.len()];
        let lease = if attempt % CANCEL_EVERY == 0 {
            let patience = Duration::from_millis(1 + ((attempt + client) % 4) as u64);
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
        let entered = Instant::now();
        history.record_lease(client, &lease, entered);
        lease.release().await.unwrap();
        done.fetch_add(1, Ordering::Relaxed);
    }
    cancelled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaks_no_descriptor_connection_watch_or_node() {
    let server = common::dedicated_server(ZooKeeperOptions::default()).await;
    let namespace = common::namespace("leaks");
    let admin = common::admin(&server.url(), None).await;
    // The admin session and the `mntr` connection asking.
    let with_admin = alive_connections(&server).await;
    let inspector = common::client(&server.url(), &namespace).await;
    let inspect = inspector.inspect().unwrap();
    // Opens the inspection session, so it is part of every count below.
    assert!(inspect.residue("").await.unwrap().is_empty());
    let fds_without_clients = open_fds();
    // And the inspector's two sessions (locking, inspection).
    let connections_without_clients = with_admin + 2;
    common::eventually(
        Duration::from_secs(10),
        "the admin's and the inspector's connections",
        || async { alive_connections(&server).await == connections_without_clients },
    )
    .await;

    let keys: Arc<Vec<LockKey>> = Arc::new(
        (0..KEYS)
            .map(|k| LockKey::new(format!("hot-{k}")).unwrap())
            .collect(),
    );
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let lock = Arc::new(common::client(&server.url(), &namespace).await);
        // Every session a client keeps exists from here on: one for the ttl used.
        distlock_testkit::cycles(&*lock, &keys[0], &AcquireOptions::new(), 1)
            .await
            .unwrap();
        clients.push(lock);
    }
    // One session, so one socket, per client; the server may still be closing
    // the probe connection each client's connect made, hence the poll.
    let fds_with_clients = open_fds();
    assert_eq!(fds_with_clients, fds_without_clients + CLIENTS);
    let connections_with_clients = connections_without_clients + CLIENTS as i64;
    common::eventually(
        Duration::from_secs(10),
        "one server connection per client",
        || async { alive_connections(&server).await == connections_with_clients },
    )
    .await;

    let (history, done) = (Arc::new(History::new()), Arc::new(AtomicUsize::new(0)));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(client, lock)| {
            tokio::spawn(churn(
                client,
                lock.clone(),
                keys.clone(),
                history.clone(),
                done.clone(),
            ))
        })
        .collect();
    let mut cancelled = 0;
    for task in tasks {
        cancelled += task.await.unwrap();
    }
    let took = started.elapsed();
    let cycles = done.load(Ordering::Relaxed);
    println!("{cycles} cycles and {cancelled} cancelled acquires in {took:?}");
    assert!(cycles >= leak_cycles());
    assert!(cancelled > 0, "no acquire was cancelled");
    assert_eq!(
        history.check(),
        Vec::new(),
        "mutual exclusion or token order"
    );

    // A cancelled acquire's cleanup runs in the background: give it a moment.
    common::eventually(Duration::from_secs(10), "no lock node left", || async {
        lock_nodes(&admin, &namespace).await == 0
    })
    .await;
    assert_eq!(inspect.residue("").await.unwrap(), Vec::<String>::new());
    common::eventually(Duration::from_secs(10), "no watch left", || async {
        common::counter(&server, "zk_watch_count").await == 0
    })
    .await;
    let fds_after = open_fds();
    let connections_after = alive_connections(&server).await;
    println!(
        "with the clients: {fds_with_clients} descriptors and {connections_with_clients} \
         server connections before, {fds_after} and {connections_after} after"
    );
    assert_eq!(
        fds_after, fds_with_clients,
        "descriptors with the clients alive"
    );
    assert_eq!(
        connections_after, connections_with_clients,
        "server connections with the clients alive"
    );

    drop(clients);
    common::eventually(
        Duration::from_secs(10),
        "descriptors back once the clients are dropped",
        || async { open_fds() == fds_without_clients },
    )
    .await;
    common::eventually(
        Duration::from_secs(10),
        "server connections back once the clients are dropped",
        || async { alive_connections(&server).await == connections_without_clients },
    )
    .await;
    println!(
        "without the clients: {fds_without_clients} descriptors and \
         {connections_without_clients} server connections before, {} and {} after",
        open_fds(),
        alive_connections(&server).await
    );
    assert_eq!(lock_nodes(&admin, &namespace).await, 0);
}
