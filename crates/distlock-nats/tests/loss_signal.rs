//! A held lock's loss signal costs the server no JetStream consumer: the
//! lease listens on its key's subject, and its `lost()` still fires at once
//! when an operator deletes the key, through this client or another.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, LossReason};
use distlock_nats::NatsConfig;
use distlock_testkit::servers::NatsServer;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_listens_for_its_loss_without_a_consumer() {
    let server = NatsServer::start()
        .await
        .expect("nats-server (scripts/install-backends)");
    let lock = NatsConfig::new([server.addr().to_string()])
        .bucket("loss")
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("k").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let lease = lock.acquire(&key, &opts).await.unwrap();
    // An operator's deletion, right after the grant: pushed, long before the ttl.
    assert!(lock.backend().delete_holder(&key).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost() within 5s of the deletion");
    assert_eq!(reason, LossReason::Revoked);
    let info = lock.backend().store().stream.get_info().await.unwrap();
    assert_eq!(
        info.state.consumer_count, 0,
        "consumers on the bucket's stream after a lease and its loss"
    );
}

/// The server's count of subscriptions.
async fn subscriptions(server: &NatsServer) -> u64 {
    server.varz_count("subscriptions").await.expect("/varz")
}

/// A lease's subscription outlives it for a moment, and this client's next
/// grant of the key listens on it instead of sending one of its own; it
/// still hears another client's deletion. (One thread: the first lease's
/// signal is dropped while its release awaits the server, before the next
/// acquire starts.)
#[tokio::test]
async fn a_released_keys_subscription_serves_its_next_grant() {
    let server = NatsServer::start()
        .await
        .expect("nats-server (scripts/install-backends)");
    let config = NatsConfig::new([server.addr().to_string()]).bucket("kept");
    let lock = config.clone().connect().await.unwrap();
    let operator = config.connect().await.unwrap();
    let key = LockKey::new("k").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let first = lock.acquire(&key, &opts).await.unwrap();
    let while_held = subscriptions(&server).await;
    first.release().await.unwrap();
    let second = lock.acquire(&key, &opts).await.unwrap();
    assert_eq!(
        subscriptions(&server).await,
        while_held,
        "the second grant of the key sent a subscription of its own"
    );
    assert!(operator.backend().delete_holder(&key).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), second.lost())
        .await
        .expect("lost() within 5s of another client's deletion");
    assert_eq!(reason, LossReason::Revoked);
}
