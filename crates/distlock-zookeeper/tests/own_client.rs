//! Locks on the application's own `zookeeper_client::Client`: their nodes are
//! ephemeral nodes of that client's session (distlock opens none of its
//! own), they exclude each other and raise tokens, and a ttl the session
//! cannot serve is refused naming its timeout.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey};
use distlock_zookeeper::ZkConfig;
use std::time::Duration;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(6);

/// The application's client, with its own session timeout.
async fn app_client(endpoint: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(endpoint)
        .await
        .expect("the application's client connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_the_apps_session_exclude_and_raise_tokens() {
    let server = common::shared_server().await;
    let namespace = common::namespace("own-client");
    let (app, other_app) = (
        app_client(&server.url()).await,
        app_client(&server.url()).await,
    );
    let lock = ZkConfig::from_client(app.clone())
        .namespace(&namespace)
        .connect()
        .await
        .unwrap();
    let other = ZkConfig::from_client(other_app)
        .namespace(&namespace)
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("own").unwrap();
    let opts = AcquireOptions::new();
    let held = lock.acquire(&key, &opts).await.unwrap();
    // The default ttl is the session's timeout, which the server enforces.
    let (remaining, session) = (held.remaining(), app.session_timeout());
    assert!(
        remaining > session - Duration::from_secs(1) && remaining <= session,
        "{remaining:?} of a {session:?} session"
    );
    assert!(other.try_acquire(&key, &opts).await.unwrap().is_none());
    // The lock node is an ephemeral node of the application's session.
    let admin = common::admin(&server.url(), None).await;
    let dir = distlock_zookeeper::keys::lock_dir(&namespace, "own");
    let nodes = common::queue(&admin, &dir).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let (_, stat) = admin
        .get_data(&format!("{dir}/{}", nodes[0]))
        .await
        .unwrap();
    assert_eq!(stat.ephemeral_owner, app.session_id().0);

    let token = held.token();
    held.release().await.unwrap();
    let next = other.acquire(&key, &opts).await.unwrap();
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_clients_session_timeout_is_refused_naming_it() {
    let server = common::shared_server().await;
    let app = app_client(&server.url()).await;
    let session = app.session_timeout();
    let lock = ZkConfig::from_client(app)
        .namespace(common::namespace("own-ttl"))
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("own").unwrap();
    let long = AcquireOptions::new().ttl(session * 2);
    match lock.acquire(&key, &long).await {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(reason.contains("from_client"), "{reason}");
            assert!(reason.contains(&format!("{session:?}")), "{reason}");
        }
        other => panic!("a ttl above the session timeout gave {other:?}"),
    }
    let within = AcquireOptions::new().ttl(session / 2);
    lock.acquire(&key, &within)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
