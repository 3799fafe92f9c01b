//! The commands each Redlock node serves per cycle, counted by the nodes
//! themselves (`INFO commandstats`): two `EVALSHA` (acquire, release) while the
//! fence counters agree, and the fence round (a third, `raise_fence.lua`) only
//! on the nodes won whose counter is behind the token handed out.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, command_calls, delta, raw, servers};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::servers::{RedisOptions, RedisServer};
use redis::aio::MultiplexedConnection;
use std::collections::HashMap;
use std::time::Duration;

/// Five nodes, a client of all of them, and an admin connection to each.
async fn five() -> (Vec<RedisServer>, Redlock, Vec<MultiplexedConnection>) {
    let nodes = servers(5, RedisOptions::default()).await;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let lock = RedlockConfig::from_urls(&urls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut conns = Vec::new();
    for node in &nodes {
        conns.push(admin(node).await);
    }
    (nodes, lock, conns)
}

/// Acquires and releases `key` `cycles` times; returns the tokens.
async fn cycles(lock: &Redlock, key: &LockKey, cycles: usize) -> Vec<u64> {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::No);
    let mut tokens = Vec::new();
    for _ in 0..cycles {
        let lease = lock.acquire(key, &opts).await.unwrap();
        tokens.push(lease.token().get());
        lease.release().await.unwrap();
    }
    tokens
}

/// `EVALSHA` calls per node while `run` runs (the client sends nothing else
/// in a cycle; the rest of commandstats is what the scripts run inside).
async fn evalsha_per_node<F: Future<Output = T>, T>(
    conns: &mut [MultiplexedConnection],
    run: F,
) -> (Vec<u64>, T) {
    let mut before = Vec::new();
    for conn in conns.iter_mut() {
        before.push(command_calls(conn).await);
    }
    let out = run.await;
    let mut calls = Vec::new();
    for (conn, before) in conns.iter_mut().zip(&before) {
        let grown: HashMap<String, u64> = delta(before, &command_calls(conn).await);
        let others: Vec<&String> = grown
            .keys()
            .filter(|name| name.starts_with("eval") && *name != "evalsha")
            .collect();
        assert!(
            others.is_empty(),
            "script calls other than EVALSHA: {others:?}"
        );
        calls.push(grown.get("evalsha").copied().unwrap_or(0));
    }
    (calls, out)
}

/// Every node's fence counter of `key`.
async fn counters(conns: &mut [MultiplexedConnection], key: &str) -> Vec<u64> {
    let mut values = Vec::new();
    for conn in conns.iter_mut() {
        let value: String = raw(conn, &["GET", &format!("distlock:{{{key}}}:fence")]).await;
        values.push(value.parse().unwrap());
    }
    values
}

/// Sets the fence counter of `key` on the nodes at `which` to `value`.
async fn set_counters(conns: &mut [MultiplexedConnection], which: &[usize], key: &str, value: u64) {
    for &i in which {
        let fence = format!("distlock:{{{key}}}:fence");
        let _: String = raw(&mut conns[i], &["SET", &fence, &value.to_string()]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_counters_agree_a_cycle_costs_each_node_two_commands() {
    const CYCLES: usize = 20;
    let (_nodes, lock, mut conns) = five().await;
    let key = LockKey::new("cycle").unwrap();
    // The first cycle seeds each counter from its node's clock: they differ, and
    // the fence round makes them agree.
    cycles(&lock, &key, 1).await;
    let agreed = counters(&mut conns, "cycle").await;
    assert!(agreed.windows(2).all(|w| w[0] == w[1]), "{agreed:?}");
    let (calls, tokens) = evalsha_per_node(&mut conns, cycles(&lock, &key, CYCLES)).await;
    // Acquire + release: no fence round.
    assert_eq!(calls, vec![2 * CYCLES as u64; 5]);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(tokens[0] > agreed[0], "{tokens:?} after {agreed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_round_raises_only_the_nodes_behind_and_only_without_a_majority_at_the_token() {
    let (_nodes, lock, mut conns) = five().await;
    let key = LockKey::new("drift").unwrap();
    let before = cycles(&lock, &key, 1).await[0];

    // One node ahead: the token is its counter, which only that node has, so
    // the other four are raised to it (a third EVALSHA each).
    let ahead = before + 1_000;
    set_counters(&mut conns, &[0], "drift", ahead).await;
    let (calls, tokens) = evalsha_per_node(&mut conns, cycles(&lock, &key, 1)).await;
    assert_eq!(calls, vec![2, 3, 3, 3, 3]);
    assert_eq!(tokens, vec![ahead + 1]);
    assert_eq!(counters(&mut conns, "drift").await, vec![ahead + 1; 5]);

    // A majority ahead (three of five at the same value), two behind: the
    // majority already holds counters ≥ the token, so no round, and the two
    // stay behind.
    let majority = ahead + 1_000;
    set_counters(&mut conns, &[1, 2, 4], "drift", majority).await;
    let (calls, tokens) = evalsha_per_node(&mut conns, cycles(&lock, &key, 1)).await;
    assert_eq!(calls, vec![2; 5]);
    assert_eq!(tokens, vec![majority + 1]);
    let after = counters(&mut conns, "drift").await;
    assert_eq!(
        after,
        vec![
            ahead + 2,
            majority + 1,
            majority + 1,
            ahead + 2,
            majority + 1
        ]
    );

    // Any later majority meets one of those three: the next token is higher still,
    // though two counters lag (no round again: the same three answer the max).
    let (calls, tokens) = evalsha_per_node(&mut conns, cycles(&lock, &key, 1)).await;
    assert_eq!(calls, vec![2; 5]);
    assert_eq!(tokens, vec![majority + 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_is_the_acquire_and_release_rounds_and_the_counter_sums_every_node() {
    const CYCLES: u64 = 10;
    let (_nodes, lock, mut conns) = five().await;
    let inspect = lock.inspect().unwrap();
    let key = LockKey::new("floor").unwrap();
    let ttl = Duration::from_secs(30);
    inspect.floor_cycle(&key, ttl).await.unwrap();
    let counted_before = inspect.server_requests().await.unwrap().unwrap();
    let floors = async {
        for _ in 0..CYCLES {
            inspect.floor_cycle(&key, ttl).await.unwrap();
        }
    };
    let (calls, ()) = evalsha_per_node(&mut conns, floors).await;
    let counted_after = inspect.server_requests().await.unwrap().unwrap();
    // Two rounds, no fence round, on every node.
    assert_eq!(calls, vec![2 * CYCLES; 5]);
    // Each node: the floor's requests, this test's two commandstats readings
    // and the second counter reading.
    assert_eq!(counted_after - counted_before, 5 * (2 * CYCLES + 3));
}
