//! `Inspect` on a real server: the holder is the queue's first node with its
//! czxid, residue lists every queued node, an operator's deletion hands the lock
//! on, and `distlock check`'s version and round trip work.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up: a failure here fails the test"
)]

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockKey, LossReason, Wait};
use std::time::Duration;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Wait::For(Duration::from_secs(20)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_residue_and_operator_deletion() {
    let server = common::shared_server().await;
    let namespace = common::namespace("inspect");
    let (holder, waiter, operator) = (
        common::client(&server.url(), &namespace).await,
        std::sync::Arc::new(common::client(&server.url(), &namespace).await),
        common::client(&server.url(), &namespace).await,
    );
    let inspect = operator.inspect().unwrap();
    let key = LockKey::new("ledger/2024").unwrap();
    assert_eq!(inspect.holder(&key).await.unwrap(), None);
    assert!(!inspect.delete_holder(&key).await.unwrap());
    assert!(inspect.residue("").await.unwrap().is_empty());

    let lease = holder.acquire(&key, &opts()).await.unwrap();
    let (task_waiter, task_key) = (waiter.clone(), key.clone());
    let next = tokio::spawn(async move { task_waiter.acquire(&task_key, &opts()).await });
    let dir = holder.backend().lock_dir(key.as_str());
    let admin = common::admin(&server.url(), None).await;
    common::eventually(Duration::from_secs(5), "the waiter queues", || async {
        common::queue(&admin, &dir).await.len() == 2
    })
    .await;

    let found = inspect.holder(&key).await.unwrap().unwrap();
    assert_eq!(found.token, Some(lease.token()));
    assert_eq!(found.owner, common::queue(&admin, &dir).await[0]);
    let residue = inspect.residue("ledger/").await.unwrap();
    assert_eq!(residue.len(), 2, "{residue:?}");
    assert!(
        residue.iter().all(|node| node.starts_with(&dir)),
        "{residue:?}"
    );
    assert!(inspect.residue("other").await.unwrap().is_empty());

    assert!(inspect.delete_holder(&key).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .unwrap();
    assert_eq!(reason, LossReason::Revoked);
    let next = next.await.unwrap().unwrap();
    assert!(next.token() > found.token.unwrap());
    next.release().await.unwrap();
    assert!(inspect.residue("").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_check_and_round_trip() {
    let server = common::shared_server().await;
    let lock = common::client(&server.url(), &common::namespace("check")).await;
    let inspect = lock.inspect().unwrap();
    assert_eq!(inspect.ping_name(), Some("exists /"));
    inspect.ping().await.unwrap();
    // The testkit's server is recent and allows `srvr`.
    assert_eq!(inspect.pitfalls().await.unwrap(), Vec::<String>::new());
}
