//! A cluster member cut off its peers on loopback, through the peer links:
//! the cut leader loses its quorum (etcd's other members elect one of their
//! own); healed, it rejoins. The chaos trials' partitions rest on this.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::servers::zookeeper::Mode;
use distlock_testkit::servers::{EtcdCluster, ZooKeeperEnsemble, ZooKeeperOptions};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Long enough for an election on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `check` until it is true, failing the test after `PATIENCE`.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_partitioned_etcd_leader_is_replaced_and_rejoins_when_healed() {
    let cluster = EtcdCluster::start_partitionable(3).await.unwrap();
    let first = cluster.wait_for_leader(PATIENCE).await.unwrap();
    cluster.partition(first).unwrap();
    // The majority elects one of its own; the cut member, still running and
    // reachable by clients, follows no one it can hear.
    eventually("a leader among the other two", || async {
        let mut led_by = Vec::new();
        for index in (0..3).filter(|i| *i != first) {
            let status = cluster.member(index).unwrap().status().await;
            led_by.extend(status.ok().map(|s| s.leader));
        }
        let old = cluster.member(first).unwrap().member_id();
        led_by.len() == 2 && led_by[0] == led_by[1] && led_by[0] != old && led_by[0] != 0
    })
    .await;
    cluster.heal(first).unwrap();
    eventually("the healed member to follow the new leader", || async {
        let new = cluster.leader().await;
        let own = cluster.member(first).unwrap().status().await;
        matches!((new, own), (Some(leader), Ok(status))
            if leader != first && status.leader == cluster.member(leader).unwrap().member_id())
    })
    .await;
}

#[tokio::test]
async fn a_partitioned_zookeeper_leader_stops_leading_and_rejoins_when_healed() {
    let ensemble = ZooKeeperEnsemble::start_partitionable(3, &ZooKeeperOptions::default())
        .await
        .unwrap();
    let first = ensemble.leader(PATIENCE).await.unwrap();
    ensemble.partition(first).unwrap();
    // Its followers cannot reach it, so it loses its quorum. Natively its
    // election channel may bypass the relays, so it may still win votes the
    // others cannot act on: the majority need not elect a leader meanwhile.
    eventually("the cut leader to stop leading", || async {
        ensemble.mode(first).await != Mode::Leader
    })
    .await;
    ensemble.heal(first).unwrap();
    eventually("one leader again, every server serving", || async {
        let mut leaders = 0;
        for index in 0..3 {
            match ensemble.mode(index).await {
                Mode::Leader => leaders += 1,
                Mode::Follower => {}
                Mode::NotServing => return false,
            }
        }
        leaders == 1
    })
    .await;
}
