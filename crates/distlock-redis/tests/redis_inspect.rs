//! `Inspect` on real servers, for RedisLock and Redlock: the holder with its
//! token, residue, an operator's force-unlock that the holder notices and that
//! wakes a waiter, the deployment warnings, and PING.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, client, raw, server, servers};
use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DynLock, LockError, LockKey, LossReason};
use distlock_redis::{DEFAULT_NAMESPACE, LockKeys, RedisConfig, RedlockConfig};
use distlock_testkit::servers::{RedisOptions, RedisServer};
use std::sync::Arc;
use std::time::Duration;

fn inspect(lock: &DynLock) -> &dyn Inspect {
    lock.inspect().expect("every adapter offers Inspect")
}

/// Holder, residue and a force-unlock that fires `lost()` and hands the lock to
/// a waiter at once, on any Redis lock over `nodes`.
async fn holder_residue_and_force_unlock(nodes: &[RedisServer], lock: DynLock, waiter: DynLock) {
    let key = LockKey::new("inspect/held").unwrap();
    let ttl = Duration::from_secs(30);
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let holder = inspect(&lock).holder(&key).await.unwrap().expect("held");
    assert_eq!(holder.token, Some(lease.token()));
    assert_eq!(holder.owner.len(), 32, "{holder:?}");
    assert!(
        holder.expires_in.is_some_and(|left| left <= ttl),
        "{holder:?}"
    );
    let residue = inspect(&lock).residue("inspect/").await.unwrap();
    assert_eq!(residue.len(), 1, "{residue:?}");
    assert!(residue[0].contains("{inspect/held}"), "{residue:?}");
    assert!(inspect(&lock).residue("other/").await.unwrap().is_empty());

    let waiting = tokio::spawn({
        let key = key.clone();
        async move { waiter.acquire(&key, &AcquireOptions::new().ttl(ttl)).await }
    });
    // The waiter subscribes after its first attempt found the lock held; from
    // then on only the force-unlock's message can hand it the lock within the
    // bound below (the holder's ttl is 30 s).
    let channel = LockKeys::new(DEFAULT_NAMESPACE, &key).channel;
    for node in nodes {
        let conn = admin(node).await;
        common::eventually(Duration::from_secs(5), "the waiter subscribed", || {
            let (mut conn, channel) = (conn.clone(), channel.clone());
            async move {
                let numsub: (String, i64) = raw(&mut conn, &["PUBSUB", "NUMSUB", &channel]).await;
                numsub.1 > 0
            }
        })
        .await;
    }
    assert!(inspect(&lock).delete_holder(&key).await.unwrap());
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the force-unlock wakes the waiter")
        .unwrap()
        .unwrap();
    assert!(next.token() > lease.token());
    let reason = tokio::time::timeout(Duration::from_secs(15), lease.lost())
        .await
        .expect("the holder notices at its next renewal");
    assert_eq!(reason, LossReason::Revoked);
    next.release().await.unwrap();
    assert!(!inspect(&lock).delete_holder(&key).await.unwrap());
    assert_eq!(inspect(&lock).holder(&key).await.unwrap(), None);
    assert!(inspect(&lock).residue("inspect/").await.unwrap().is_empty());
    inspect(&lock).ping().await.unwrap();
}

async fn redis_client(server: &RedisServer) -> DynLock {
    Arc::new(client(server).await)
}

async fn redlock_client(nodes: &[RedisServer]) -> DynLock {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    Arc::new(
        RedlockConfig::from_urls(&urls)
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_inspect_finds_and_force_unlocks_the_holder() {
    let server = server().await;
    let lock = redis_client(&server).await;
    assert_eq!(inspect(&lock).ping_name(), Some("PING"));
    holder_residue_and_force_unlock(
        std::slice::from_ref(&server),
        lock,
        redis_client(&server).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_inspect_finds_and_force_unlocks_the_holder_on_every_node() {
    let nodes = servers(3, RedisOptions::default()).await;
    let lock = redlock_client(&nodes).await;
    assert_eq!(inspect(&lock).ping_name(), Some("PING to all nodes"));
    holder_residue_and_force_unlock(&nodes, lock, redlock_client(&nodes).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_pitfalls_name_persistence_without_a_guard() {
    let server = server().await;
    let lock = redis_client(&server).await;
    // The launcher's server persists nothing.
    let warnings = inspect(&lock).pitfalls().await.unwrap();
    assert!(
        warnings.len() == 1
            && warnings[0].contains("no AOF and no RDB save points")
            && warnings[0].contains("restart_guard"),
        "{warnings:?}"
    );
    let guarded: DynLock = Arc::new(
        RedisConfig::from_url(&format!("{}?restart_guard=30s", server.url()))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    assert_eq!(
        inspect(&guarded).pitfalls().await.unwrap(),
        Vec::<String>::new()
    );
    let mut conn = admin(&server).await;
    let _: String = raw(&mut conn, &["CONFIG", "SET", "save", "3600 1"]).await;
    let warnings = inspect(&lock).pitfalls().await.unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].contains("only RDB snapshots"),
        "{warnings:?}"
    );
    let _: String = raw(&mut conn, &["CONFIG", "SET", "appendonly", "yes"]).await;
    assert_eq!(
        inspect(&lock).pitfalls().await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_pitfalls_name_eviction_and_replicas_without_wait() {
    let server = server().await;
    let url = format!("{}?restart_guard=30s", server.url());
    let client = || async {
        let lock: DynLock = Arc::new(
            RedisConfig::from_url(&url)
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
        lock
    };
    let lock = client().await;
    assert_eq!(
        inspect(&lock).pitfalls().await.unwrap(),
        Vec::<String>::new()
    );
    let mut conn = admin(&server).await;
    let _: String = raw(
        &mut conn,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .await;
    let warnings = inspect(&lock).pitfalls().await.unwrap();
    assert!(
        warnings.len() == 1 && warnings[0].contains("maxmemory-policy is allkeys-lru"),
        "{warnings:?}"
    );
    let replica = servers(1, RedisOptions::default()).await.pop().unwrap();
    let mut replica_conn = admin(&replica).await;
    let port = server.port().to_string();
    let _: String = raw(&mut replica_conn, &["REPLICAOF", "127.0.0.1", &port]).await;
    let on_replica = redis_client(&replica).await;
    let warnings = inspect(&on_replica).pitfalls().await.unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("is a replica")),
        "{warnings:?}"
    );
    common::eventually(
        Duration::from_secs(30),
        "the primary counts its replica",
        || {
            let lock = lock.clone();
            async move {
                let warnings = inspect(&lock).pitfalls().await.unwrap();
                warnings
                    .iter()
                    .any(|w| w.contains("does not set wait_replicas"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_pitfalls_name_each_node_without_persistence_and_an_even_count() {
    let mut nodes = servers(3, RedisOptions::default()).await;
    let persistent = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    nodes.extend(servers(1, persistent).await);
    let lock = redlock_client(&nodes).await;
    let warnings = inspect(&lock).pitfalls().await.unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("4 nodes")),
        "{warnings:?}"
    );
    for node in &nodes[..3] {
        let port = format!(":{}/", node.port());
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(&port) && w.contains("append-only persistence is off")),
            "{warnings:?}"
        );
    }
    let aof_port = format!(":{}/", nodes[3].port());
    assert!(
        !warnings.iter().any(|w| w.contains(&aof_port)),
        "{warnings:?}"
    );
    nodes[0].kill();
    let warnings = inspect(&lock).pitfalls().await.unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("cannot check") && w.contains(&format!(":{}/", nodes[0].port()))),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_inspection_needs_a_majority() {
    let nodes = servers(3, RedisOptions::default()).await;
    let lock = redlock_client(&nodes).await;
    nodes[0].kill();
    nodes[1].kill();
    let key = LockKey::new("inspect/majority").unwrap();
    for err in [
        inspect(&lock).holder(&key).await.map(|_| ()).unwrap_err(),
        inspect(&lock)
            .delete_holder(&key)
            .await
            .map(|_| ())
            .unwrap_err(),
        inspect(&lock).residue("").await.map(|_| ()).unwrap_err(),
        inspect(&lock).ping().await.unwrap_err(),
    ] {
        assert!(
            matches!(err, LockError::QuorumUnavailable { answered: 1, .. }),
            "{err}"
        );
    }
}
