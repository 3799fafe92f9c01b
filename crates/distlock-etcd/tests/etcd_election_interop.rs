//! Interop with the real `etcdctl elect` (etcd's Go `concurrency.Election`),
//! both ways: with the same namespace (the root, for `etcdctl`) a name without
//! `/` or `%` is one election for both, and each side sees the other's
//! proposal as the leader.

mod common;

use common::{connect, eventually, queue, raw, server, unique};
use distlock_core::{AcquireOptions, DistributedLock, Wait};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// `etcdctl elect <name> <proposal>` against `etcd`, its stdout piped.
#[allow(clippy::unwrap_used)] // Set-up: failing here fails the calling test.
fn etcdctl_elect(
    etcd: &distlock_testkit::servers::EtcdServer,
    name: &str,
    proposal: &str,
) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut etcdctl = Command::from(etcd.etcdctl().unwrap());
    etcdctl
        .args(["elect", name, proposal])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = etcdctl.spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// SIGTERM makes etcdctl resign (delete its key) and exit.
#[allow(clippy::unwrap_used)]
async fn resign(mut etcdctl: Child) {
    let pid = i32::try_from(etcdctl.id().unwrap()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), etcdctl.wait())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_leads_we_see_its_proposal_and_follow_it() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let client = connect(&[etcd.addr()], "").await;
    let election = client.election().expect("etcd offers elections");
    let name = unique("elect-etcdctl-first");
    let (etcdctl, mut lines) = etcdctl_elect(&etcd, name.as_str(), "their-proposal");
    // etcdctl prints its key, then its proposal, once elected.
    let printed = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        printed.starts_with(&format!("{name}/")),
        "etcdctl printed {printed:?}"
    );
    let theirs = queue(&raw, "", &name).await;
    assert_eq!(theirs.len(), 1, "etcdctl's key is not where we look");

    let leader = election.leader(&name).await.unwrap().expect("a leader");
    assert_eq!(leader.owner, "their-proposal");
    assert_eq!(
        leader.token.map(|t| t.get()),
        Some(theirs[0].create_revision().unsigned_abs())
    );

    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Wait::For(Duration::from_secs(30)));
    let (waiter_name, campaigner) = (name.clone(), election.clone());
    let waiter = tokio::spawn(async move {
        let won = campaigner
            .campaign(&waiter_name, "our-proposal", &opts)
            .await;
        (Instant::now(), won)
    });
    eventually(
        Duration::from_secs(10),
        "our key queued behind etcdctl's",
        || async { queue(&raw, "", &name).await.len() == 2 },
    )
    .await;
    assert!(!waiter.is_finished(), "elected while etcdctl leads");

    let resigned_at = Instant::now();
    resign(etcdctl).await;
    let (elected_at, leadership) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let leadership = leadership.unwrap();
    assert!(
        elected_at - resigned_at < Duration::from_secs(3),
        "hand-off took {:?}",
        elected_at - resigned_at
    );
    assert!(
        leadership.term().get() > theirs[0].create_revision().unsigned_abs(),
        "term not above etcdctl's"
    );
    let ours = queue(&raw, "", &name).await;
    assert_eq!(ours.len(), 1);
    assert_eq!(
        ours[0].value(),
        b"our-proposal",
        "our key does not carry our proposal"
    );
    leadership.resign().await.unwrap();
    assert!(queue(&raw, "", &name).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_lead_etcdctl_waits_until_we_resign() {
    let etcd = server().await;
    let raw = raw(&[etcd.addr()]).await;
    let client = connect(&[etcd.addr()], "").await;
    let election = client.election().expect("etcd offers elections");
    let name = unique("elect-us-first");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let leadership = election
        .campaign(&name, "our-proposal", &opts)
        .await
        .unwrap();
    let (etcdctl, mut lines) = etcdctl_elect(&etcd, name.as_str(), "their-proposal");
    eventually(
        Duration::from_secs(20),
        "etcdctl's key queued behind ours",
        || async { queue(&raw, "", &name).await.len() == 2 },
    )
    .await;
    let queued = queue(&raw, "", &name).await;
    assert_eq!(
        queued[0].create_revision().unsigned_abs(),
        leadership.term().get()
    );
    assert_eq!(queued[1].value(), b"their-proposal");
    let early = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await;
    assert!(early.is_err(), "etcdctl printed {early:?} while we lead");

    let resigned_at = Instant::now();
    leadership.resign().await.unwrap();
    let printed = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        printed.starts_with(&format!("{name}/")),
        "etcdctl printed {printed:?}"
    );
    assert!(
        resigned_at.elapsed() < Duration::from_secs(5),
        "etcdctl elected {:?} after we resigned",
        resigned_at.elapsed()
    );
    let leader = election
        .leader(&name)
        .await
        .unwrap()
        .expect("etcdctl leads");
    assert_eq!(leader.owner, "their-proposal");
    assert!(leader.token > Some(leadership_term_floor(&queued)));
    resign(etcdctl).await;
    eventually(Duration::from_secs(5), "etcdctl resigned", || async {
        queue(&raw, "", &name).await.is_empty()
    })
    .await;
}

/// Our (first) key's create revision: every later leader's term is above it.
fn leadership_term_floor(queued: &[etcd_client::KeyValue]) -> distlock_core::FencingToken {
    distlock_core::FencingToken::new(queued[0].create_revision().unsigned_abs())
}
