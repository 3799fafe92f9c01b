//! Sessions: the timeout follows the ttl within the server's range, and a server
//! crash ends sessions, fires `lost()`, fails waiters, and leaves the client usable.

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, LossReason, Wait};
use distlock_testkit::servers::ZooKeeperOptions;
use distlock_zookeeper::ZkConfig;
use std::time::{Duration, Instant};

/// Capabilities report the server's minimum session timeout, and ttls the
/// server cannot grant as a session timeout are rejected with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_must_be_a_session_timeout_the_server_grants() {
    let server = common::shared_server().await;
    let options = ZooKeeperOptions::default();
    let lock = common::client(&server.url(), &common::namespace("range")).await;
    assert_eq!(lock.capabilities().min_ttl, options.min_session_timeout);
    let key = LockKey::new("k").unwrap();

    let below = AcquireOptions::new()
        .ttl(options.min_session_timeout / 2)
        .wait(Wait::No);
    match lock.acquire(&key, &below).await {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(reason.contains("minimum"), "{reason}")
        }
        other => panic!("ttl below minSessionTimeout gave {other:?}"),
    }
    let above = AcquireOptions::new()
        .ttl(options.max_session_timeout * 2)
        .wait(Wait::No);
    match lock.acquire(&key, &above).await {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(reason.contains("maxSessionTimeout"), "{reason}")
        }
        other => panic!("ttl above maxSessionTimeout gave {other:?}"),
    }

    // A pinned session timeout serves every ttl up to it, and no more.
    let pinned = ZkConfig {
        session_timeout: Some(Duration::from_secs(2)),
        ..common::config(&server.url(), &common::namespace("pinned"))
    };
    let lock = pinned.connect().await.unwrap();
    let within = AcquireOptions::new()
        .ttl(Duration::from_secs(1))
        .wait(Wait::No);
    lock.acquire(&key, &within)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let beyond = AcquireOptions::new()
        .ttl(Duration::from_secs(3))
        .wait(Wait::No);
    match lock.acquire(&key, &beyond).await {
        Err(LockError::InvalidOptions { reason }) => assert!(reason.contains("2s"), "{reason}"),
        other => panic!("ttl above the pinned session timeout gave {other:?}"),
    }
}

/// The server is killed: the holder's `lost()` fires and a queued waiter gets an
/// error, both within a few session timeouts. After the restart the same client
/// acquires again (on a new session) and the token is above the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_crash_ends_sessions_then_locking_resumes_with_higher_tokens() {
    let server = common::dedicated_server(ZooKeeperOptions::default()).await;
    let namespace = common::namespace("crash");
    let (holder, waiter) = (
        common::client(&server.url(), &namespace).await,
        common::client(&server.url(), &namespace).await,
    );
    let key = LockKey::new("ledger").unwrap();
    let ttl = Duration::from_secs(1);
    let opts = AcquireOptions::new().ttl(ttl).wait(Wait::Forever);
    let lease = holder.acquire(&key, &opts).await.unwrap();
    let old_token = lease.token();
    let (waiter_key, waiter_opts) = (key.clone(), opts.clone());
    let queued = tokio::spawn(async move {
        waiter
            .acquire(&waiter_key, &waiter_opts)
            .await
            .map(|l| l.token())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!queued.is_finished(), "the waiter got a held lock");

    server.kill();
    let killed_at = Instant::now();
    let reason = tokio::time::timeout(ttl * 3, lease.lost())
        .await
        .expect("lost() after the server died");
    assert!(
        matches!(reason, LossReason::Expired | LossReason::SessionEnded),
        "lost for {reason:?}"
    );
    assert!(!lease.is_held());
    match tokio::time::timeout(ttl * 5, queued)
        .await
        .expect("waiter still waiting after its session died")
        .unwrap()
    {
        Err(e) => assert!(e.is_transient(), "waiter error {e}"),
        Ok(token) => panic!("a waiter got the lock from a dead server (token {token})"),
    }
    assert!(killed_at.elapsed() < ttl * 5);

    server.restart().await.unwrap();
    // The server reloads the old sessions and expires them one session timeout
    // after it starts; then the new session's node is first.
    let again = holder
        .acquire(&key, &opts.clone().wait(Wait::For(Duration::from_secs(20))))
        .await
        .unwrap();
    assert!(
        again.token() > old_token,
        "token {} after the restart, {old_token} before",
        again.token()
    );
    again.release().await.unwrap();
    drop(lease);
}
