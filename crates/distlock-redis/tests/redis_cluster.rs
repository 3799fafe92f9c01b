//! Redis Cluster mode against three launched primaries: a lock's slot moved to
//! another primary while clients contend for it (mutual exclusion holds, no
//! waiter sleeps past the polling bound), and what `distlock check` reports of
//! the cluster (topology, per-primary warnings).
// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DistributedLock, Fence, FencedWrite, FencingToken};
use distlock_core::{LockError, LockKey, Renewal, Wait};
use distlock_redis::{LockKeys, RedisConfig, RedisLock};
use distlock_testkit::servers::{Launched, RedisCluster, RedisOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "cluster-test:";

async fn cluster() -> RedisCluster {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(RedisCluster::start(3)))
        .await
        .expect("launcher thread")
        .expect("redis-server and redis-cli must be installed: sudo scripts/install-backends")
}

async fn client(cluster: &RedisCluster) -> RedisLock {
    RedisConfig::from_url(&cluster.url())
        .unwrap()
        .namespace(NAMESPACE)
        .connect()
        .await
        .unwrap()
}

/// The slot of `key`'s lock, as the cluster computes it.
async fn slot_of(cluster: &RedisCluster, key: &LockKey) -> u16 {
    let keys = LockKeys::new(NAMESPACE, key);
    let slot = cluster
        .cli(0, &["CLUSTER", "KEYSLOT", &keys.lock])
        .await
        .unwrap();
    slot.trim().parse().unwrap()
}

/// What the contending clients saw.
#[derive(Default)]
struct Tally {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    acquired: AtomicUsize,
    longest_wait_ms: AtomicUsize,
}

/// One client acquiring and releasing `key` until `stop`, holding it briefly
/// each time; an acquire that finds someone inside is an overlap.
async fn contend(lock: RedisLock, key: LockKey, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    let options = AcquireOptions::new()
        .ttl(TTL)
        .renewal(Renewal::Manual)
        .wait(Wait::For(Duration::from_secs(20)));
    while !stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let lease = lock.acquire(&key, &options).await.unwrap();
        let waited = usize::try_from(asked.elapsed().as_millis()).unwrap_or(usize::MAX);
        tally.longest_wait_ms.fetch_max(waited, Ordering::SeqCst);
        if tally.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            tally.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        tally.inside.fetch_sub(1, Ordering::SeqCst);
        tally.acquired.fetch_add(1, Ordering::SeqCst);
        lease.release().await.unwrap();
    }
}

/// The lock's ttl: a waiter whose wake-up was lost sleeps at most the holder's
/// remaining ttl before it looks again, so no wait may exceed it by much.
const TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_the_locks_slot_under_contention_keeps_mutual_exclusion() {
    let cluster = cluster().await;
    let key = LockKey::new("reshard/counter").unwrap();
    let slot = slot_of(&cluster, &key).await;
    let from = cluster.owner_of(slot).await.unwrap();
    let to = (from + 1) % cluster.nodes().len();
    let (tally, stop) = (Arc::new(Tally::default()), Arc::new(AtomicBool::new(false)));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let lock = client(&cluster).await;
        let (key, tally, stop) = (key.clone(), tally.clone(), stop.clone());
        workers.push(tokio::spawn(contend(lock, key, tally, stop)));
    }
    // Contention is under way before the slot moves.
    let started = Instant::now();
    while tally.acquired.load(Ordering::SeqCst) < 50 {
        assert!(started.elapsed() < Duration::from_secs(20), "no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let moving = Instant::now();
    let before = tally.acquired.load(Ordering::SeqCst);
    cluster.move_slot(slot, from, to).await.unwrap();
    let moved_in = moving.elapsed();
    let during = tally.acquired.load(Ordering::SeqCst) - before;
    // And goes on after it, on the new owner.
    let after_move = tally.acquired.load(Ordering::SeqCst);
    let resumed = Instant::now();
    while tally.acquired.load(Ordering::SeqCst) < after_move + 50 {
        assert!(
            resumed.elapsed() < Duration::from_secs(20),
            "no progress after the move"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(cluster.owner_of(slot).await.unwrap(), to);
    let longest = Duration::from_millis(tally.longest_wait_ms.load(Ordering::SeqCst) as u64);
    eprintln!(
        "reshard of slot {slot} from node {from} to node {to}: {moved_in:?}, {during} \
         acquisitions during it, {} in all, longest wait {longest:?}, {} overlaps",
        tally.acquired.load(Ordering::SeqCst),
        tally.overlaps.load(Ordering::SeqCst)
    );
    assert_eq!(
        tally.overlaps.load(Ordering::SeqCst),
        0,
        "two holders at once"
    );
    assert!(
        longest < TTL + Duration::from_secs(1),
        "a waiter slept {longest:?}: a release was not heard and it waited past the ttl"
    );
}

#[tokio::test]
async fn check_reports_every_primary_and_its_warnings() {
    let cluster = cluster().await;
    let lock = client(&cluster).await;
    // One primary that may evict lock keys.
    cluster
        .cli(1, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .await
        .unwrap();
    let inspect: &dyn Inspect = lock.inspect().expect("the redis adapter inspects");
    let topology = inspect.topology().await.unwrap().expect("a topology");
    assert!(
        topology.contains("a Redis Cluster of 3 primaries"),
        "{topology}"
    );
    for node in cluster.nodes() {
        assert!(topology.contains(&node.addr().to_string()), "{topology}");
    }
    assert!(topology.contains("slots 0-5460"), "{topology}");
    let pitfalls = inspect.pitfalls().await.unwrap();
    let evicting: Vec<&String> = pitfalls
        .iter()
        .filter(|w| w.contains("maxmemory-policy is allkeys-lru"))
        .collect();
    assert_eq!(evicting.len(), 1, "{pitfalls:#?}");
    assert!(evicting[0].contains(&cluster.nodes()[1].addr().to_string()));
    let unpersisted = pitfalls
        .iter()
        .filter(|w| w.contains("append-only persistence is off") && w.contains("cluster mode"))
        .count();
    assert_eq!(unpersisted, 3, "one per primary: {pitfalls:#?}");
    // The bench's request count adds up every primary's.
    let before = inspect.server_requests().await.unwrap().expect("counted");
    inspect.ping().await.unwrap();
    let after = inspect.server_requests().await.unwrap().expect("counted");
    assert!(after > before, "{before} then {after}");
    // Residue is found on whichever primary holds it.
    let mut leases = Vec::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        let key = LockKey::new(format!("residue/{name}")).unwrap();
        leases.push(lock.acquire(&key, &AcquireOptions::new()).await.unwrap());
    }
    assert_eq!(inspect.residue("residue/").await.unwrap().len(), 6);
    for lease in leases {
        lease.release().await.unwrap();
    }
    assert!(inspect.residue("residue/").await.unwrap().is_empty());
}

/// How long a waiter takes to get `key` once its holder releases it, with a
/// ttl so long that only the release message can explain a quick wake. With
/// `reshard`, the slot moves while the waiter waits (subscribed on the old
/// owner), so the release is heard only if it subscribed again on the new one.
async fn wake_latency(
    cluster: &RedisCluster,
    holder: &RedisLock,
    key: &LockKey,
    reshard: Option<(u16, usize, usize)>,
) -> Duration {
    let waiter = client(cluster).await;
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(30)));
    let held = holder.acquire(key, &options).await.unwrap();
    let waiting = {
        let (key, options) = (key.clone(), options.clone());
        tokio::spawn(async move {
            let lease = waiter.acquire(&key, &options).await.unwrap();
            let woken = Instant::now();
            lease.release().await.unwrap();
            woken
        })
    };
    subscribed(cluster, key).await;
    if let Some((slot, from, to)) = reshard {
        cluster.move_slot(slot, from, to).await.unwrap();
        subscribed(cluster, key).await;
    }
    let released = Instant::now();
    held.release().await.unwrap();
    waiting.await.unwrap() - released
}

/// Waits until the primary of `key`'s slot counts one subscriber of its
/// shard channel.
async fn subscribed(cluster: &RedisCluster, key: &LockKey) {
    let channel = LockKeys::new(NAMESPACE, key).channel;
    let owner = cluster.owner_of(slot_of(cluster, key).await).await.unwrap();
    let started = Instant::now();
    loop {
        let count = cluster
            .cli(owner, &["PUBSUB", "SHARDNUMSUB", &channel])
            .await
            .unwrap();
        if count.lines().nth(1).map(str::trim) == Some("1") {
            return;
        }
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(10),
            "no subscriber on node {owner}: {count}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_release_wakes_the_waiter_through_sharded_pubsub_even_across_a_reshard() {
    let cluster = cluster().await;
    let holder = client(&cluster).await;
    let key = LockKey::new("wake/me").unwrap();
    // The polling bound here is the 5 s nap; only a message wakes sooner.
    let bound = Duration::from_secs(1);
    let plain = wake_latency(&cluster, &holder, &key, None).await;
    assert!(plain < bound, "woken after {plain:?}");
    let slot = slot_of(&cluster, &key).await;
    let from = cluster.owner_of(slot).await.unwrap();
    let to = (from + 1) % cluster.nodes().len();
    let moved = wake_latency(&cluster, &holder, &key, Some((slot, from, to))).await;
    assert!(moved < bound, "woken after {moved:?} once the slot moved");
    eprintln!("wake latency: {plain:?}; {moved:?} for a waiter whose slot moved while it waited");
}

#[tokio::test]
async fn leases_in_several_slots_hear_of_a_cluster_restart_that_lost_them() {
    let cluster = cluster().await;
    let lock = client(&cluster).await;
    // Manual renewal and a long ttl: only the restart check can notice.
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .renewal(Renewal::Manual);
    let mut leases = Vec::new();
    for name in ["a", "b", "c", "d", "e", "f"] {
        let key = LockKey::new(format!("restart/{name}")).unwrap();
        leases.push(lock.acquire(&key, &options).await.unwrap());
    }
    let mut slots = Vec::new();
    for lease in &leases {
        slots.push(slot_of(&cluster, lease.key()).await);
    }
    slots.sort_unstable();
    slots.dedup();
    assert!(slots.len() > 1, "the leases must span slots: {slots:?}");
    Launched::restart(&cluster).await.unwrap();
    let restarted = Instant::now();
    for lease in &leases {
        tokio::time::timeout(Duration::from_secs(10), lease.lost())
            .await
            .expect("lost() fires once the subscriber is back and the keys are read");
    }
    eprintln!(
        "six leases over {} slots lost within {:?} of the restart",
        slots.len(),
        restarted.elapsed()
    );
}

#[tokio::test]
async fn fenced_writes_land_in_their_resources_slots_and_warnings_name_each_primary() {
    let cluster = cluster().await;
    let fence = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .namespace(NAMESPACE)
        .connect_fence()
        .await
        .unwrap();
    // Resources on different primaries, with and without a hash tag.
    for resource in ["stock", "{cart}:7", "orders/42", "a", "b", "c"] {
        let newer = FencingToken::new(20);
        fence
            .write(resource, newer, FencedWrite::set("v"))
            .await
            .unwrap();
        let stale = fence
            .write(resource, FencingToken::new(10), FencedWrite::set("old"))
            .await;
        assert!(
            matches!(stale, Err(LockError::StaleToken { .. })),
            "{resource}: {stale:?}"
        );
        assert_eq!(fence.read(resource).await.unwrap().as_deref(), Some("v"));
        assert_eq!(fence.highest(resource).await.unwrap(), Some(newer));
    }
    let pitfalls = fence.pitfalls().await.unwrap();
    for node in cluster.nodes() {
        let node = node.addr().to_string();
        assert!(
            pitfalls
                .iter()
                .any(|w| w.starts_with(&node) && w.contains("forgets every fence record")),
            "{node}: {pitfalls:#?}"
        );
    }
}

#[tokio::test]
async fn replicas_are_reported_and_wait_replicas_counts_them() {
    let runtime = tokio::runtime::Handle::current();
    let start = move || {
        runtime.block_on(RedisCluster::start_replicated(
            3,
            1,
            RedisOptions::default(),
        ))
    };
    let cluster = tokio::task::spawn_blocking(start).await.unwrap().unwrap();
    let plain = client(&cluster).await;
    let inspect = plain.inspect().expect("inspect");
    let topology = inspect.topology().await.unwrap().expect("a topology");
    assert_eq!(topology.matches("1 replica(s): ").count(), 3, "{topology}");
    let pitfalls = inspect.pitfalls().await.unwrap();
    let unacknowledged = pitfalls
        .iter()
        .filter(|w| w.contains("has 1 replica(s) and the URL does not set wait_replicas"))
        .count();
    assert_eq!(unacknowledged, 3, "one per primary: {pitfalls:#?}");

    let acked = |replicas: u32| {
        let url = format!(
            "{}?wait_replicas={replicas}&wait_timeout=300ms",
            cluster.url()
        );
        async move {
            RedisConfig::from_url(&url)
                .unwrap()
                .namespace(NAMESPACE)
                .connect()
                .await
                .unwrap()
        }
    };
    let key = LockKey::new("replicated/job").unwrap();
    let once = acked(1).await;
    let lease = once.acquire(&key, &AcquireOptions::new()).await.unwrap();
    lease.release().await.unwrap();
    let warnings = once.inspect().expect("inspect").pitfalls().await.unwrap();
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("does not set wait_replicas")),
        "{warnings:#?}"
    );
    // Each primary has one replica: asking for two must fail, and undo.
    let twice = acked(2).await;
    let refused = twice
        .acquire(&key, &AcquireOptions::new().wait(Wait::No))
        .await;
    let shown = format!("{refused:?}");
    assert!(shown.contains("only 1 of 2 replicas"), "{shown}");
    // The undo runs in the background, right after the refusal.
    let refused_at = Instant::now();
    while inspect.holder(&key).await.unwrap().is_some() {
        let waited = refused_at.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "the acquire was not undone"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
