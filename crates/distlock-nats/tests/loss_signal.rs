//! A held lock's loss signal costs the server no JetStream consumer: the
//! lease listens on its key's subject, and its `lost()` still fires at once
//! when an operator deletes the key.
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
