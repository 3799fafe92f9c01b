//! Failover through Sentinel, on a launched primary, replica and three
//! Sentinels that judge the primary down after 500 ms: the client follows the
//! new primary and keeps a lease the replica had; a lease the replica missed
//! fires `lost()` and its lock is granted again (the failover hole), unless
//! `wait_replicas` refused the acquire in the first place.
//!
//! The figures these tests print (`--nocapture`) are the ones in
//! docs/backends/redis.md.
// A failed set-up or step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{eventually, raw};
use distlock_core::{
    AcquireOptions, DistributedLock, Fence, FencedWrite, FencingToken, SingleLease,
};
use distlock_core::{LockKey, LossReason, Wait};
use distlock_redis::{LockKeys, RedisConfig};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::{RedisServer, SentinelOptions, SentinelTopology};
use distlock_testkit::{Fault, FaultControl};
use std::time::{Duration, Instant};

/// How long a failover may take here: 500 ms to be judged down, an election,
/// the promotion, and the Sentinels' next look at the new primary.
const FAILOVER_BOUND: Duration = Duration::from_secs(20);

async fn topology() -> SentinelTopology {
    launch(SentinelOptions {
        down_after: Duration::from_millis(500),
        // Also how long Sentinel leaves a replica that follows another address
        // (the fault proxy below) before "fixing" it: longer than the test.
        failover_timeout: Duration::from_secs(60),
        ..SentinelOptions::default()
    })
    .await
}

async fn launch(options: SentinelOptions) -> SentinelTopology {
    let runtime = tokio::runtime::Handle::current();
    let topology = tokio::task::spawn_blocking(move || {
        runtime.block_on(async {
            let topology = SentinelTopology::start(options).await?;
            topology.settled().await?;
            Ok::<_, distlock_testkit::servers::ServerError>(topology)
        })
    })
    .await
    .expect("launcher thread")
    .expect("redis-server and redis-sentinel must be installed: sudo scripts/install-backends");
    wait_replica_online(common::admin(topology.primary()).await).await;
    topology
}

async fn wait_replica_online(primary: redis::aio::MultiplexedConnection) {
    // Online, not merely connected: the first sync waits out repl-diskless-sync-delay.
    eventually(Duration::from_secs(30), "replica online", || {
        let mut conn = primary.clone();
        async move {
            raw::<String>(&mut conn, &["INFO", "replication"])
                .await
                .contains("state=online")
        }
    })
    .await;
}

/// Waits until the Sentinels name `server` as the primary.
async fn wait_promoted(topology: &SentinelTopology, server: &RedisServer) {
    let url = format!("redis://{}/", topology.sentinels()[0].addr());
    let client = redis::Client::open(url).expect("sentinel url");
    eventually(FAILOVER_BOUND, "the replica promoted", || {
        let client = client.clone();
        async move {
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                return false;
            };
            let named: redis::RedisResult<Option<(String, u16)>> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg("distlock")
                .query_async(&mut conn)
                .await;
            matches!(named, Ok(Some((_, port))) if port == server.port())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_failover_and_keeps_a_lease_the_replica_had() {
    let topology = topology().await;
    let url = format!("{}?wait_replicas=1&wait_timeout=2s", topology.url());
    let lock = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("survives-failover").unwrap();
    let ttl = Duration::from_secs(3);
    // Acknowledged by the replica, so the promoted replica has it.
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();

    let killed = Instant::now();
    topology.primary().kill();
    wait_promoted(&topology, topology.replica()).await;
    let promoted = killed.elapsed();
    // The client follows: a new acquire succeeds on the new primary (no replica
    // is left there, so this client does not ask for acknowledgements).
    let follower = RedisConfig::from_url(&topology.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let other = LockKey::new("after-failover").unwrap();
    let opts = AcquireOptions::new().wait(Wait::For(FAILOVER_BOUND));
    follower
        .acquire(&other, &opts)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let followed = killed.elapsed();
    // The held lease is renewed on the new primary past its first ttl.
    let new_primary = common::admin(topology.replica()).await;
    let lock_key = LockKeys::new("distlock:", &key).lock;
    tokio::time::sleep(ttl + ttl / 2).await;
    let owner: Option<String> = raw(&mut new_primary.clone(), &["GET", &lock_key]).await;
    assert!(
        owner.is_some(),
        "the lease's key is gone from the new primary"
    );
    assert!(lease.is_held(), "the lease that survived was dropped");
    eprintln!(
        "sentinel failover: promoted {promoted:?} after the primary was killed; a new \
         client's acquire succeeded on the new primary {followed:?} after the kill"
    );
    // No replica is left to acknowledge the release, and the error says so.
    let err = lease.release().await.unwrap_err().to_string();
    assert!(err.contains("only 0 of 1 replicas"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_replica_missed_is_lost_in_a_failover_unless_wait_replicas_refused_it() {
    let topology = topology().await;
    // The replica reaches the primary through a proxy we can cut: a reset link
    // is down at once and stays down (every reconnect is reset too), and
    // nothing already sent can arrive later, as it could with a paused replica
    // reading its socket buffer when resumed.
    let link = FaultProxy::start(topology.primary().addr()).await.unwrap();
    let mut replica = common::admin(topology.replica()).await;
    let port = link.addr().port().to_string();
    let _: String = raw(&mut replica, &["REPLICAOF", "127.0.0.1", &port]).await;
    wait_replica_online(common::admin(topology.primary()).await).await;

    let acked = format!("{}?wait_replicas=1&wait_timeout=200ms", topology.url());
    let acked_lock = RedisConfig::from_url(&acked)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let fence = RedisConfig::from_url(&acked)
        .unwrap()
        .connect_fence()
        .await
        .unwrap();
    let key = LockKey::new("missed-by-the-replica").unwrap();
    let once = AcquireOptions::new()
        .ttl(Duration::from_secs(20))
        .wait(Wait::No);
    let write = FencedWrite::set("v");
    fence
        .write("doc", FencingToken::new(1), write.clone())
        .await
        .unwrap();

    link.set_fault(Fault::Reset).await;
    eventually(Duration::from_secs(10), "the replica's link down", || {
        let mut replica = replica.clone();
        async move {
            raw::<String>(&mut replica, &["INFO", "replication"])
                .await
                .contains("master_link_status:down")
        }
    })
    .await;
    // With wait_replicas the acquire fails, naming the count, and is undone.
    let err = acked_lock
        .acquire(&key, &once)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only 0 of 1 replicas"), "{err}");
    let err = fence
        .write("doc", FencingToken::new(2), write)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("only 0 of 1 replicas"), "{err}");
    let primary = common::admin(topology.primary()).await;
    let lock_key = LockKeys::new("distlock:", &key).lock;
    eventually(Duration::from_secs(2), "the refused acquire undone", || {
        let (mut primary, lock_key) = (primary.clone(), lock_key.clone());
        async move { raw::<i64>(&mut primary, &["EXISTS", &lock_key]).await == 0 }
    })
    .await;

    // Without it the lock is granted on the primary alone...
    let first = RedisConfig::from_url(&topology.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let lease = first.acquire(&key, &once).await.unwrap();
    let first_token = lease.token();
    let lost = lease.lost();
    // A permit and a read share the replica missed too: the promoted replica
    // has another run_id, so they are checked with the lock.
    let permit = first.semaphore().unwrap().acquire(&key, 1, &once).await;
    let share = first.rwlock().unwrap().read(&key, &once).await;
    let (permit, share) = (permit.unwrap(), share.unwrap());
    let shares_lost = [
        ("permit", common::watch_loss(permit.lease())),
        ("read share", common::watch_loss(share.lease())),
    ];
    let killed = Instant::now();
    topology.primary().kill();
    wait_promoted(&topology, topology.replica()).await;
    // ...so after the failover a second client gets it while the first lease's
    // ttl still runs: two holders, until the first hears of it.
    let second = RedisConfig::from_url(&topology.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let taken = second
        .acquire(&key, &AcquireOptions::new().wait(Wait::For(FAILOVER_BOUND)))
        .await
        .unwrap();
    let granted_again = killed.elapsed();
    assert!(granted_again < Duration::from_secs(20), "{granted_again:?}");
    let reason = tokio::time::timeout(FAILOVER_BOUND, lost)
        .await
        .expect("lost() fired");
    assert_eq!(reason, LossReason::Revoked);
    let lock_lost_at = Instant::now();
    for (what, lost) in shares_lost {
        let lost_at = common::revoked_within(lost, FAILOVER_BOUND).await;
        // The same check as the lock's, not the renewal ttl/3 after the acquire.
        let apart = lost_at.max(lock_lost_at) - lost_at.min(lock_lost_at);
        assert!(
            apart < Duration::from_millis(500),
            "{what} lost {apart:?} apart from the lock"
        );
    }
    eprintln!(
        "sentinel failover hole: lock granted again {granted_again:?} after the primary was \
         killed; the first holder heard within {:?}",
        killed.elapsed()
    );
    // The fence counter was lost with the lock, but the acquire script seeds a
    // missing counter from the server clock, so tokens still rise.
    assert!(
        taken.token() > first_token,
        "{:?} <= {first_token:?}",
        taken.token()
    );
    taken.release().await.unwrap();
    drop(lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_data_nodes_each_take_their_own_password_and_neither_leaks() {
    let (data, sentinel) = ("data p@ss", "sentinel \"pw\"");
    let topology = launch(SentinelOptions {
        password: Some(data.into()),
        sentinel_password: Some(sentinel.into()),
        ..SentinelOptions::default()
    })
    .await;
    let config = RedisConfig::from_url(&topology.url()).unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("p@ss") && !shown.contains("pw"), "{shown}");
    let lock = config.connect().await.unwrap();
    // What `distlock check` prints: the primary Sentinel named, and its replica.
    let topology_line = lock.inspect().unwrap().topology().await.unwrap().unwrap();
    let replica = format!("127.0.0.1:{} online", topology.replica().port());
    assert!(topology_line.contains("a primary"), "{topology_line}");
    assert!(topology_line.contains(&replica), "{topology_line}");
    let key = LockKey::new("with-passwords").unwrap();
    lock.acquire(&key, &AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A wrong Sentinel password: the Sentinels refuse, and the error hides both.
    let wrong = topology
        .url()
        .replace("sentinel_password=", "sentinel_password=x");
    let err = RedisConfig::from_url(&wrong)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("no Sentinel named a primary"), "{text}");
    assert!(!text.contains("p@ss") && !text.contains("pw"), "{text}");
}
