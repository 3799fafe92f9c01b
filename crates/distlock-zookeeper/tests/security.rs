//! Digest auth and ACLs, and the errors for bad configuration: a chroot that does
//! not exist, credentials the ACL does not allow. (An unreachable server is in
//! `connect.rs`.)

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Wait};
use distlock_testkit::servers::ZooKeeperOptions;
use distlock_zookeeper::{DigestAuth, ZkConfig};
use std::time::Duration;
use zookeeper_client as zk;

fn digest(user: &str, password: &str) -> Option<DigestAuth> {
    Some(DigestAuth {
        user: user.into(),
        password: password.into(),
    })
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::No)
}

/// With credentials, lock directories and nodes are creator-only for writes:
/// another principal (or nobody) can neither delete the holder's node nor join
/// the queue, and is told why. The same principal contends normally, and the
/// server's super user can still act as the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_stops_other_principals_from_deleting_our_node() {
    let super_password = "super-secret-pw".to_owned();
    let server = common::dedicated_server(ZooKeeperOptions {
        super_password: Some(super_password.clone()),
        ..ZooKeeperOptions::default()
    })
    .await;
    let namespace = common::namespace("acl");
    let alice = ZkConfig {
        auth: digest("alice", "alice-pw"),
        ..common::config(&server.url(), &namespace)
    };
    let key = LockKey::new("payroll").unwrap();
    let holder = alice.clone().connect().await.unwrap();
    // A short ttl, so the renewal notices the operator's deletion quickly.
    let lease = holder
        .acquire(&key, &opts().ttl(Duration::from_secs(2)))
        .await
        .unwrap();
    let dir = holder.backend().lock_dir(key.as_str());
    let anonymous = common::admin(&server.url(), None).await;
    let node = format!("{dir}/{}", common::queue(&anonymous, &dir).await.remove(0));

    let mallory = common::admin(&server.url(), Some("mallory:mallory-pw")).await;
    assert_eq!(mallory.delete(&node, None).await, Err(zk::Error::NoAuth));
    assert_eq!(anonymous.delete(&node, None).await, Err(zk::Error::NoAuth));
    // A wrong password is another principal to ZooKeeper.
    let impostor = common::admin(&server.url(), Some("alice:guess")).await;
    assert_eq!(impostor.delete(&node, None).await, Err(zk::Error::NoAuth));

    let mallory_lock = ZkConfig {
        auth: digest("alice", "guess"),
        ..common::config(&server.url(), &namespace)
    }
    .connect()
    .await
    .unwrap();
    match mallory_lock.acquire(&key, &opts()).await {
        Err(LockError::Config { reason, .. }) => {
            assert!(
                reason.contains("ACL") && reason.contains("credentials"),
                "{reason}"
            );
            assert!(!reason.contains("guess"), "the password leaked: {reason}");
        }
        other => panic!("acquire by another principal gave {other:?}"),
    }

    // The same principal on another client contends like anyone.
    let colleague = alice.connect().await.unwrap();
    assert!(
        colleague
            .try_acquire(&key, &opts())
            .await
            .unwrap()
            .is_none()
    );
    assert!(lease.is_held(), "the holder lost its lease");

    let operator = common::admin(&server.url(), Some(&format!("super:{super_password}"))).await;
    operator.delete(&node, None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .unwrap();
    assert_eq!(reason, distlock_core::LossReason::Revoked);
    let next = colleague.acquire(&key, &opts()).await.unwrap();
    next.release().await.unwrap();
}

/// A chroot that does not exist is a configuration error at connect, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_chroot_is_a_clear_error() {
    let server = common::shared_server().await;
    let config = ZkConfig::from_url(&format!("zk://{}/no/such/chroot", server.url())).unwrap();
    match config.connect().await {
        Err(LockError::Config { reason, .. }) => {
            assert!(
                reason.contains("/no/such/chroot") && reason.contains("does not exist"),
                "{reason}"
            );
        }
        other => panic!("connect with a missing chroot gave {other:?}"),
    }
    // An existing chroot works, and locks live under it.
    let admin = common::admin(&server.url(), None).await;
    let chroot = format!("/{}", common::namespace("chroot"));
    admin
        .create(
            &chroot,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let lock = ZkConfig::from_url(&format!("zk://{}{chroot}?namespace=locks", server.url()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let lease = lock
        .acquire(&LockKey::new("k").unwrap(), &opts())
        .await
        .unwrap();
    assert_eq!(
        admin
            .list_children(&format!("{chroot}/locks/k"))
            .await
            .unwrap()
            .len(),
        1
    );
    lease.release().await.unwrap();
}
