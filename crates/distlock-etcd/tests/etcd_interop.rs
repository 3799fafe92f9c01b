//! Interop with the real `etcdctl lock` (etcd's Go `concurrency.Mutex`), both ways:
//! with the same namespace (the root, for `etcdctl`) a name without `/` or `%` is
//! one lock for both.

mod common;

use common::{connect, eventually, queue, raw, server, unique};
use distlock_core::{AcquireOptions, DistributedLock, Wait};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `etcdctl lock <name> [command...]` against `etcd`, its stdout piped.
#[allow(clippy::unwrap_used)] // Set-up: failing here fails the calling test.
fn etcdctl_lock(
    etcd: &distlock_testkit::servers::EtcdServer,
    name: &str,
    command: &[&str],
) -> Child {
    let mut etcdctl = Command::from(etcd.etcdctl().unwrap());
    etcdctl
        .args(["lock", name])
        .args(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    etcdctl.spawn().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_etcdctl_blocks_us_until_it_unlocks() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let lock = connect(&[etcd.addr()], "").await;
    let key = unique("interop-held-by-etcdctl");
    let mut etcdctl = etcdctl_lock(&etcd, key.as_str(), &[]);
    // etcdctl prints its key once it holds the lock.
    let mut lines = BufReader::new(etcdctl.stdout.take().unwrap()).lines();
    let printed = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        printed.starts_with(&format!("{key}/")),
        "etcdctl printed {printed:?}"
    );
    let theirs = queue(&raw, "", &key).await;
    assert_eq!(theirs.len(), 1, "etcdctl's key is not where we look");

    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    assert!(
        lock.try_acquire(&key, &opts).await.unwrap().is_none(),
        "acquired a lock etcdctl holds"
    );
    let (waiter_key, wait) = (
        key.clone(),
        opts.clone().wait(Wait::For(Duration::from_secs(30))),
    );
    let waiter = tokio::spawn(async move {
        let lease = lock.acquire(&waiter_key, &wait).await;
        (Instant::now(), lease, lock)
    });
    eventually(
        Duration::from_secs(10),
        "our key queued behind etcdctl's",
        || async { queue(&raw, "", &key).await.len() == 2 },
    )
    .await;
    assert!(
        !waiter.is_finished(),
        "acquired while etcdctl holds the lock"
    );

    // SIGTERM makes etcdctl unlock (delete its key) and exit.
    let pid = i32::try_from(etcdctl.id().unwrap()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let unlocked_at = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(10), etcdctl.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "etcdctl exited with {status}");
    let (acquired_at, lease, _lock) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let lease = lease.unwrap();
    assert!(
        acquired_at - unlocked_at < Duration::from_secs(3),
        "hand-off from etcdctl took {:?}",
        acquired_at - unlocked_at
    );
    assert!(
        lease.token().get() > theirs[0].create_revision().unsigned_abs(),
        "token not above etcdctl's key"
    );
    lease.release().await.unwrap();
    assert!(queue(&raw, "", &key).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_we_hold_blocks_etcdctl_until_we_release() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let lock = connect(&[etcd.addr()], "").await;
    let key = unique("interop-held-by-us");
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await
        .unwrap();
    // etcdctl runs `echo` once it holds the lock, then unlocks and exits.
    let mut etcdctl = etcdctl_lock(&etcd, key.as_str(), &["echo", "etcdctl-got-it"]);
    eventually(
        Duration::from_secs(20),
        "etcdctl's key queued behind ours",
        || async { queue(&raw, "", &key).await.len() == 2 },
    )
    .await;
    let queued = queue(&raw, "", &key).await;
    assert_eq!(
        queued[0].create_revision().unsigned_abs(),
        lease.token().get(),
        "we are not the oldest key"
    );
    assert!(
        etcdctl.try_wait().unwrap().is_none(),
        "etcdctl finished while we hold the lock"
    );

    let released_at = Instant::now();
    lease.release().await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(20), etcdctl.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let took = released_at.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "etcdctl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("etcdctl-got-it"),
        "etcdctl printed {stdout:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "etcdctl got the lock {took:?} after our release"
    );
    eventually(Duration::from_secs(5), "etcdctl unlocked", || async {
        queue(&raw, "", &key).await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_slash_never_share_a_queue_with_their_prefix() {
    // etcdctl's own layout: `a/b`'s keys live inside `a`'s range. Ours escape the
    // slash, so holding `a` leaves `a/b` free, and the other way round.
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "").await;
    let other = connect(&[etcd.addr()], "").await;
    let parent = unique("parent");
    let child = distlock_core::LockKey::new(format!("{parent}/child")).unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let held = lock.acquire(&child, &opts).await.unwrap();
    let free = other.try_acquire(&parent, &opts).await.unwrap();
    assert!(free.is_some(), "`{parent}` waited on `{child}`");
    free.unwrap().release().await.unwrap();
    held.release().await.unwrap();
}
