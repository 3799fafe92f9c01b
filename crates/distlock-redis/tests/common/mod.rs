//! Shared by the adapter tests: real servers from the testkit and a raw admin
//! connection to read what the server itself counts.
// Test helpers: a failed set-up fails the test that called it.
#![allow(dead_code, clippy::expect_used)]

use distlock_testkit::servers::{RedisOptions, RedisServer};
use std::collections::HashMap;
use std::time::Duration;

/// Starts `count` servers. The launcher's future is not `Send`, so it runs on a
/// blocking thread of the current runtime.
pub async fn servers(count: usize, options: RedisOptions) -> Vec<RedisServer> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        runtime.block_on(RedisServer::start_many_with(count, &options))
    })
    .await
    .expect("launcher thread")
    .expect("redis-server must be installed: sudo scripts/install-backends")
}

/// One server.
pub async fn server() -> RedisServer {
    servers(1, RedisOptions::default())
        .await
        .pop()
        .expect("one server")
}

/// A raw connection to `server`.
pub async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

/// Runs a raw command.
pub async fn raw<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    args: &[&str],
) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(conn).await.expect("admin command")
}

/// `INFO commandstats` as command → calls.
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = raw(conn, &["INFO", "commandstats"]).await;
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// What changed between two commandstats snapshots, minus the INFO calls that
/// took them.
pub fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> HashMap<String, u64> {
    after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .filter_map(|(name, calls)| {
            let change = calls - before.get(name).copied().unwrap_or(0);
            (change > 0).then(|| (name.clone(), change))
        })
        .collect()
}

/// Polls `check` until it is true, failing after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not true within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
