//! What an uncontended lock cycle costs on a Redis Cluster, counted by the
//! primaries themselves (`INFO commandstats`): the same two `EVALSHA` as on one
//! server, both on the lock's slot's primary.
// A failed set-up or step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use distlock_core::{AcquireOptions, LockKey};
use distlock_redis::RedisConfig;
use distlock_testkit::servers::RedisCluster;
use std::time::Duration;

/// `cmdstat_evalsha` calls on node `index`.
async fn evalsha_calls(cluster: &RedisCluster, index: usize) -> u64 {
    let stats = cluster.cli(index, &["INFO", "commandstats"]).await.unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test]
async fn an_uncontended_cycle_costs_two_evalsha_on_the_locks_primary() {
    const CYCLES: u64 = 50;
    let runtime = tokio::runtime::Handle::current();
    let start = move || runtime.block_on(RedisCluster::start(3));
    let cluster = tokio::task::spawn_blocking(start).await.unwrap().unwrap();
    let lock = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("cycle").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // Warm-up: the cluster connection, the fence counter's seeding.
    distlock_testkit::cycles(&lock, &key, &opts, 1)
        .await
        .unwrap();
    let nodes = cluster.nodes().len();
    let mut before = Vec::new();
    for index in 0..nodes {
        before.push(evalsha_calls(&cluster, index).await);
    }
    distlock_testkit::cycles(&lock, &key, &opts, CYCLES as usize)
        .await
        .unwrap();
    let mut added = Vec::new();
    for (index, before) in before.iter().enumerate() {
        added.push(evalsha_calls(&cluster, index).await - before);
    }
    assert_eq!(added.iter().sum::<u64>(), 2 * CYCLES, "per node: {added:?}");
    assert_eq!(
        added.iter().filter(|n| **n > 0).count(),
        1,
        "one primary: {added:?}"
    );
}
