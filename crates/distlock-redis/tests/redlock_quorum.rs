//! Redlock against real node failures: minority and majority down, a paused
//! node, a node that grants after its round, wrong passwords (restarts are in `redlock_restarts.rs`, the commands
//! each node serves per cycle in `redlock_round_trips.rs`).

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, eventually, raw, servers};
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Wait};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::servers::{RedisOptions, RedisServer};
use std::time::{Duration, Instant};

async fn five() -> Vec<RedisServer> {
    servers(5, RedisOptions::default()).await
}

async fn connect(nodes: &[RedisServer]) -> Redlock {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    RedlockConfig::from_urls(&urls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(wait)
}

/// Lock keys (not fence counters) left on the running nodes.
async fn lock_keys_on(nodes: &[&RedisServer]) -> Vec<String> {
    let mut found = Vec::new();
    for node in nodes {
        let mut conn = admin(node).await;
        let keys: Vec<String> = raw(&mut conn, &["KEYS", "distlock:{*}"]).await;
        found.extend(keys);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_down_still_acquires() {
    let nodes = five().await;
    let lock = connect(&nodes).await;
    nodes[0].kill();
    nodes[3].kill();
    let key = LockKey::new("minority-down").unwrap();
    let lease = lock
        .acquire(&key, &opts(Duration::from_secs(5), Wait::No))
        .await
        .unwrap();
    let other = connect(&nodes[..]).await;
    assert!(
        other
            .try_acquire(&key, &opts(Duration::from_secs(5), Wait::No))
            .await
            .unwrap()
            .is_none()
    );
    let first = lease.token();
    lease.release().await.unwrap();
    let again = other
        .acquire(&key, &opts(Duration::from_secs(5), Wait::No))
        .await
        .unwrap();
    assert!(again.token() > first);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_fails_fast_with_quorum_unavailable_and_leaves_nothing() {
    let nodes = five().await;
    let lock = connect(&nodes).await;
    for dead in [0, 2, 4] {
        nodes[dead].kill();
    }
    let key = LockKey::new("majority-down").unwrap();
    let started = Instant::now();
    let err = lock
        .acquire(
            &key,
            &opts(Duration::from_secs(5), Wait::For(Duration::from_secs(30))),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?} to give up",
        started.elapsed()
    );
    match &err {
        LockError::QuorumUnavailable {
            answered,
            nodes: n,
            needed,
            detail,
        } => {
            assert_eq!((*answered, *n, *needed), (2, 5, 3), "{err}");
            for dead in [0, 2, 4] {
                assert!(
                    detail.contains(&format!(":{}/", nodes[dead].port())),
                    "{detail} must name every dead node"
                );
            }
        }
        other => panic!("expected QuorumUnavailable, got {other}"),
    }
    // The two live nodes granted the lock; the failed attempt gave it back.
    assert_eq!(
        lock_keys_on(&[&nodes[1], &nodes[3]]).await,
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_paused_mid_acquire_does_not_break_exclusion() {
    let nodes = five().await;
    let (a, b) = (connect(&nodes).await, connect(&nodes).await);
    let key = LockKey::new("paused").unwrap();
    let ttl = Duration::from_secs(2);
    nodes[2].pause().unwrap();
    let lease = a
        .acquire(&key, &opts(ttl, Wait::No))
        .await
        .expect("four of five answer");
    let held_elsewhere = |what: &'static str| {
        let (b, key) = (&b, &key);
        async move {
            let second = b.try_acquire(key, &opts(ttl, Wait::No)).await.unwrap();
            assert!(second.is_none(), "{what}");
        }
    };
    held_elsewhere("second holder").await;
    nodes[2].resume().unwrap();
    held_elsewhere("second holder after resume").await;
    let first = lease.token();
    lease.release().await.unwrap();
    let next = b
        .acquire(&key, &opts(ttl, Wait::For(Duration::from_secs(5))))
        .await
        .unwrap();
    assert!(next.token() > first);
    next.release().await.unwrap();
    // Requests queued on the paused node run when it resumes; the ttl bounds them.
    let all: Vec<&RedisServer> = nodes.iter().collect();
    let deadline = Instant::now() + ttl * 2;
    while !lock_keys_on(&all).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "keys left after the ttl: {:?}",
            lock_keys_on(&all).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node that grants after its round was decided gives the lock back by itself
/// once its reply comes: here its connection is still opening when the round's
/// time runs out, so the acquire reaches it only after the lease was won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_grants_after_the_round_gives_its_lock_back() {
    let nodes = servers(3, RedisOptions::default()).await;
    nodes[2].pause().unwrap();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let timeouts = Timeouts::new(Duration::from_secs(3), Duration::from_millis(250));
    let lock = RedlockConfig::from_urls(&urls)
        .unwrap()
        .timeouts(timeouts)
        .connect()
        .await
        .expect("2 of 3 is a majority");
    let key = LockKey::new("late").unwrap();
    let lease = lock
        .acquire(&key, &opts(Duration::from_secs(30), Wait::No))
        .await
        .expect("two of three answer");
    nodes[2].resume().unwrap();
    let late = admin(&nodes[2]).await;
    // The fence counter shows the late acquire ran; the lock key must then go.
    eventually(Duration::from_secs(5), "the late grant given back", || {
        let mut late = late.clone();
        async move {
            let fence: Option<u64> = raw(&mut late, &["GET", "distlock:{late}:fence"]).await;
            let held: Option<String> = raw(&mut late, &["GET", "distlock:{late}"]).await;
            fence.is_some() && held.is_none()
        }
    })
    .await;
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_costs_that_node_its_vote_and_is_named() {
    let options = RedisOptions {
        password: Some("right".into()),
        ..RedisOptions::default()
    };
    let nodes = servers(3, options).await;
    let wrong = |node: &RedisServer| format!("redis://:wrong@127.0.0.1:{}/0", node.port());
    let urls = [wrong(&nodes[0]), nodes[1].url(), nodes[2].url()];
    let lock = RedlockConfig::from_urls(&urls)
        .unwrap()
        .connect()
        .await
        .expect("2 of 3 is a majority");
    let key = LockKey::new("auth").unwrap();
    lock.acquire(&key, &opts(Duration::from_secs(5), Wait::No))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let urls = [wrong(&nodes[0]), wrong(&nodes[1]), nodes[2].url()];
    let err = RedlockConfig::from_urls(&urls)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LockError::QuorumUnavailable { answered: 1, .. }),
        "{text}"
    );
    for node in &nodes[..2] {
        assert!(
            text.contains(&format!(":{}/", node.port())) && text.contains("authentication"),
            "{text}"
        );
    }
    assert!(!text.contains("wrong") && !text.contains("right"), "{text}");
}
