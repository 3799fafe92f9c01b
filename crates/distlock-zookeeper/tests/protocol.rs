//! The lock protocol on a real server: protected-mode recovery, the czxid token,
//! and contention with a Curator-style client.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up: a failure here fails the test"
)]

mod common;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Wait};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::proxy::FaultProxy;
use std::time::Duration;
use zookeeper_client as zk;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(20)))
}

/// The create's reply is lost with the connection (closed cleanly): the request
/// reached the server, the answer never came back. The client finds its node by
/// its uuid after reconnecting: one node, the first and only create, and the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_reply_recovers_own_node_instead_of_orphaning_it() {
    lost_create_reply_recovers(Fault::Close, "closed").await;
}

/// The same with the connection reset, which the client reports as a socket
/// error rather than a connection loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_reply_lost_to_a_reset_recovers_own_node() {
    lost_create_reply_recovers(Fault::Reset, "reset").await;
}

async fn lost_create_reply_recovers(cut: Fault, name: &str) {
    let server = common::shared_server().await;
    let namespace = common::namespace(name);
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let lock = common::client(&proxy.addr().to_string(), &namespace).await;
    let admin = common::admin(&server.url(), None).await;
    let key = LockKey::new("report").unwrap();
    let dir = lock.backend().lock_dir(key.as_str());
    // A persistent directory, so neither container cleanup nor a parent create
    // adds requests to the delayed window, and sequences start at 0.
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.mkdir(&dir, &persistent).await.unwrap();
    // The session for this ttl exists already: only the create crosses the delay.
    let warm_up = LockKey::new("warm-up").unwrap();
    lock.acquire(&warm_up, &opts())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let requests_before = lock.backend().requests_sent();

    // Every chunk takes 1 s through the proxy: the create reaches the server
    // after 1 s, and its reply would be back after 2 s.
    proxy.set_fault(Fault::Delay(Duration::from_secs(1))).await;
    let lock = std::sync::Arc::new(lock);
    let (task_lock, task_key) = (lock.clone(), key.clone());
    let acquire = tokio::spawn(async move { task_lock.acquire(&task_key, &opts()).await });
    common::eventually(
        Duration::from_secs(5),
        "the create reaches the server",
        || async { common::queue(&admin, &dir).await.len() == 1 },
    )
    .await;
    assert!(!acquire.is_finished(), "the reply arrived before the cut");
    proxy.set_fault(cut).await;
    if cut == Fault::Reset {
        // Reset also refuses new connections: let the client back in.
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.set_fault(Fault::None).await;
    }

    let lease = tokio::time::timeout(Duration::from_secs(20), acquire)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let nodes = common::queue(&admin, &dir).await;
    assert_eq!(nodes.len(), 1, "an orphan was left behind: {nodes:?}");
    assert!(
        nodes[0].ends_with("-lock-0000000000"),
        "a second create happened: {nodes:?}"
    );
    let stat = admin
        .check_stat(&format!("{dir}/{}", nodes[0]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.token().get(), u64::try_from(stat.czxid).unwrap());
    // create and the listing pipelined behind it (replies lost), list to find
    // our uuid, exists for the czxid, list for our place in line.
    assert_eq!(
        lock.backend().requests_sent() - requests_before,
        5,
        "recovery path not taken"
    );
    lease.release().await.unwrap();
    assert!(common::queue(&admin, &dir).await.is_empty());
}

/// The token is the node's czxid: it keeps rising when the lock directory is
/// deleted and recreated, although the sequence starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_is_czxid_and_rises_across_directory_recreation() {
    let server = common::shared_server().await;
    let namespace = common::namespace("czxid");
    let lock = common::client(&server.url(), &namespace).await;
    let admin = common::admin(&server.url(), None).await;
    let key = LockKey::new("inventory").unwrap();
    let dir = lock.backend().lock_dir(key.as_str());

    let mut last_token = None;
    let mut last_sequence = 0;
    for _ in 0..3 {
        let lease = lock.acquire(&key, &opts()).await.unwrap();
        let node = common::queue(&admin, &dir).await.remove(0);
        let stat = admin
            .check_stat(&format!("{dir}/{node}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            lease.token().get(),
            u64::try_from(stat.czxid).unwrap(),
            "token is not the czxid"
        );
        assert!(last_token < Some(lease.token()));
        last_token = Some(lease.token());
        last_sequence = distlock_zookeeper::keys::sequence_of(&node).unwrap();
        lease.release().await.unwrap();
    }
    assert!(last_sequence >= 2, "sequence {last_sequence}");

    admin.delete(&dir, None).await.unwrap();
    let lease = lock.acquire(&key, &opts()).await.unwrap();
    let node = common::queue(&admin, &dir).await.remove(0);
    let sequence = distlock_zookeeper::keys::sequence_of(&node).unwrap();
    assert!(
        sequence < last_sequence,
        "the directory was not recreated (sequence {sequence})"
    );
    assert!(
        Some(lease.token()) > last_token,
        "token {} after recreation, {last_token:?} before",
        lease.token()
    );
    lease.release().await.unwrap();
}

/// Another client of Curator's recipe on the same path (zookeeper-client's
/// Curator-compatible lock, with `_c_{uuid}-lock-` names) and this adapter
/// exclude each other, in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_style_lock_on_the_same_path_contends() {
    let server = common::shared_server().await;
    let namespace = common::namespace("curator");
    let lock = common::client(&server.url(), &namespace).await;
    let curator = common::admin(&server.url(), None).await;
    let key = LockKey::new("nightly-batch").unwrap();
    let dir = lock.backend().lock_dir(key.as_str());
    let parents = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    let curator_lock = || async {
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-").unwrap();
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(parents.clone())
            .unwrap();
        curator
            .lock(prefix, b"", options)
            .await
            .unwrap()
            .into_owned()
    };

    // Curator holds: we are locked out, then get it once it lets go.
    let held = curator_lock().await;
    assert!(held.lock_path().contains("/_c_") && held.lock_path().contains("-lock-"));
    match lock.acquire(&key, &opts().wait(Wait::No)).await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("acquire while a Curator client holds gave {other:?}"),
    }
    drop(held);
    let lease = lock.acquire(&key, &opts()).await.unwrap();

    // We hold: Curator waits until we release.
    let waiting = tokio::time::timeout(Duration::from_millis(500), curator_lock()).await;
    assert!(waiting.is_err(), "the Curator client got a lock we hold");
    let curator_next = tokio::spawn(async move {
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-").unwrap();
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(parents)
            .unwrap();
        curator
            .lock(prefix, b"", options)
            .await
            .map(|l| l.into_owned())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !curator_next.is_finished(),
        "the Curator client got a lock we hold"
    );
    lease.release().await.unwrap();
    let held = tokio::time::timeout(Duration::from_secs(5), curator_next)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    drop(held);
}
