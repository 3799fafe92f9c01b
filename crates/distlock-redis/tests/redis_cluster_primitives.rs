//! The semaphore, the read-write lock and the fair lock in Redis Cluster mode,
//! against three launched primaries: a release wakes a queued waiter through
//! sharded pub/sub (the scripts publish with `SPUBLISH`), and an inspection
//! finds the permits, shares and queue places on whichever primary holds them.
// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DistributedLock, Held, LockKey, Wait};
use distlock_redis::{LockKeys, RedisConfig, RedisLock};
use distlock_testkit::servers::RedisCluster;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "cluster-prims:";

/// Names whose slots are spread over all three primaries of a fresh cluster
/// (checked by [`spread_over_every_primary`]).
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

async fn cluster() -> RedisCluster {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(RedisCluster::start(3)))
        .await
        .expect("launcher thread")
        .expect("redis-server and redis-cli must be installed: sudo scripts/install-backends")
}

/// A client of `cluster` whose URL carries `params` (such as `fair=true`).
async fn client(cluster: &RedisCluster, params: &str) -> RedisLock {
    RedisConfig::from_url(&format!("{}?{params}", cluster.url()))
        .unwrap()
        .namespace(NAMESPACE)
        .connect()
        .await
        .unwrap()
}

/// The primary serving `key`'s slot (every key of a name shares it).
async fn owner_of(cluster: &RedisCluster, key: &LockKey) -> usize {
    let lock = LockKeys::new(NAMESPACE, key).lock;
    let slot = cluster
        .cli(0, &["CLUSTER", "KEYSLOT", &lock])
        .await
        .unwrap();
    cluster
        .owner_of(slot.trim().parse().unwrap())
        .await
        .unwrap()
}

/// A ttl so long that, once the waiter is subscribed, only a release message
/// wakes it within [`WAKE_BOUND`]: without one it sleeps a third of its
/// place's 5 s lifetime before trying again.
const TTL: Duration = Duration::from_secs(30);
const WAKE_BOUND: Duration = Duration::from_secs(1);

fn waiting() -> AcquireOptions {
    AcquireOptions::new().ttl(TTL).wait(Wait::For(TTL))
}

/// Waits until `key`'s primary counts `count` shard channels starting with
/// `prefix`: the waiter's release channel and its own turn channel.
async fn subscribed(cluster: &RedisCluster, key: &LockKey, prefix: &str, count: usize) {
    let owner = owner_of(cluster, key).await;
    let pattern = format!("{prefix}*");
    let started = Instant::now();
    loop {
        let channels = cluster
            .cli(owner, &["PUBSUB", "SHARDCHANNELS", &pattern])
            .await
            .unwrap();
        if channels.lines().filter(|l| !l.trim().is_empty()).count() == count {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no waiter subscribed on node {owner}: {channels:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_queued_reader_through_sharded_pubsub() {
    let cluster = cluster().await;
    let (holder, waiter) = (client(&cluster, "").await, client(&cluster, "").await);
    let key = LockKey::new("wake/rw").unwrap();
    let writing = holder.rwlock().unwrap().write(&key, &waiting()).await;
    let reader = tokio::spawn({
        let (rw, key) = (waiter.rwlock().unwrap(), key.clone());
        async move {
            let share = rw.read(&key, &waiting()).await.unwrap();
            let woken = Instant::now();
            share.release().await.unwrap();
            woken
        }
    });
    let channel = format!("{}:rw:ch", LockKeys::new(NAMESPACE, &key).lock);
    subscribed(&cluster, &key, &channel, 2).await;
    let released = Instant::now();
    writing.unwrap().release().await.unwrap();
    let latency = reader.await.unwrap() - released;
    assert!(latency < WAKE_BOUND, "reader woken after {latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_fair_waiter_through_sharded_pubsub() {
    let cluster = cluster().await;
    let (holder, waiter) = (
        client(&cluster, "fair=true").await,
        client(&cluster, "fair=true").await,
    );
    let key = LockKey::new("wake/fair").unwrap();
    let held = holder.acquire(&key, &waiting()).await.unwrap();
    let next = tokio::spawn({
        let key = key.clone();
        async move {
            let lease = waiter.acquire(&key, &waiting()).await.unwrap();
            let woken = Instant::now();
            lease.release().await.unwrap();
            woken
        }
    });
    // The release hands the turn on the head's own channel only.
    let channel = LockKeys::new(NAMESPACE, &key).channel;
    subscribed(&cluster, &key, &channel, 2).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let latency = next.await.unwrap() - released;
    assert!(latency < WAKE_BOUND, "fair waiter woken after {latency:?}");
}

/// The names' keys sit on every primary, so an inspection that asked only one
/// would miss some.
async fn spread_over_every_primary(cluster: &RedisCluster) -> Vec<LockKey> {
    let keys: Vec<LockKey> = NAMES
        .iter()
        .map(|name| LockKey::new(format!("res/{name}")).unwrap())
        .collect();
    let mut primaries = BTreeSet::new();
    for key in &keys {
        primaries.insert(owner_of(cluster, key).await);
    }
    assert_eq!(primaries.len(), 3, "the names must span every primary");
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn residue_of_permits_shares_and_queue_places_is_found_on_every_primary() {
    let cluster = cluster().await;
    let keys = spread_over_every_primary(&cluster).await;
    let lock = client(&cluster, "").await;
    let (sem, rw) = (lock.semaphore().unwrap(), lock.rwlock().unwrap());
    let options = AcquireOptions::new().ttl(TTL);
    let (mut permits, mut shares) = (Vec::new(), Vec::new());
    for key in &keys {
        permits.push(sem.acquire(key, 2, &options).await.unwrap());
        shares.push(rw.read(key, &options).await.unwrap());
    }
    let sem_inspect = sem.inspect().expect("the redis semaphore inspects");
    let rw_inspect = rw.inspect().expect("the redis read-write lock inspects");
    assert_eq!(sem_inspect.residue("res/").await.unwrap().len(), keys.len());
    assert_eq!(rw_inspect.residue("res/").await.unwrap().len(), keys.len());
    for (permit, share) in permits.into_iter().zip(shares) {
        permit.release().await.unwrap();
        share.release().await.unwrap();
    }
    assert!(sem_inspect.residue("res/").await.unwrap().is_empty());
    assert!(rw_inspect.residue("res/").await.unwrap().is_empty());

    // A fair lock's residue: its lock keys and the places of its waiters.
    let (holder, waiter) = (
        client(&cluster, "fair=true").await,
        client(&cluster, "fair=true").await,
    );
    let mut leases = Vec::new();
    for key in &keys {
        leases.push(holder.acquire(key, &options).await.unwrap());
    }
    let queued = tokio::spawn({
        let key = keys[0].clone();
        async move {
            let lease = waiter.acquire(&key, &waiting()).await.unwrap();
            lease.release().await.unwrap();
        }
    });
    let inspect: &dyn Inspect = holder.inspect().expect("the redis adapter inspects");
    let first = LockKeys::new(NAMESPACE, &keys[0]).channel;
    subscribed(&cluster, &keys[0], &first, 2).await;
    let residue = inspect.residue("res/").await.unwrap();
    let places = residue.iter().filter(|r| r.contains(":queue:")).count();
    assert_eq!(places, 1, "{residue:?}");
    assert_eq!(residue.len(), keys.len() + places, "{residue:?}");
    for lease in leases {
        lease.release().await.unwrap();
    }
    // The waiter got its turn and gave the lock back: nothing is left.
    queued.await.unwrap();
    assert!(inspect.residue("res/").await.unwrap().is_empty());
}
