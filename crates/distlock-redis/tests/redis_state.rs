//! Bounded per-name state (`state_ttl`): a collected name's tokens still rise
//! when the server clock steps back, counters written by the previous release
//! get an expiry, and a held name keeps its counter.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, connect, eventually, opts, raw, servers};
use distlock_core::{DistributedLock, FencingToken, Held, LockKey, Renewal, SingleLease, Wait};
use distlock_redis::{LockKeys, RedisLock};
use distlock_testkit::servers::{MovableClock, RedisOptions, RedisServer};
use std::time::Duration;

/// The shortest `state_ttl`, as the URL gives it.
const STATE_TTL: &str = "state_ttl=2s";

/// Lease ttl of these tests.
const TTL: Duration = Duration::from_secs(1);

/// How long collection may take: the lease's ttl, `state_ttl`, slack.
const COLLECTED_WITHIN: Duration = Duration::from_secs(20);

/// Takes and gives back `key` as a lock, a 2-permit semaphore and a write
/// share; returns the three tokens.
async fn use_once(lock: &RedisLock, key: &LockKey) -> [FencingToken; 3] {
    let o = opts(TTL, Wait::No);
    let lease = lock.acquire(key, &o).await.unwrap();
    let permit = lock.semaphore().unwrap().acquire(key, 2, &o).await.unwrap();
    let write = lock.rwlock().unwrap().write(key, &o).await.unwrap();
    let tokens = [lease.token(), permit.token(), write.token()];
    lease.release().await.unwrap();
    permit.release().await.unwrap();
    write.release().await.unwrap();
    tokens
}

/// A server of its own, a client with the shortest `state_ttl`, and the
/// server's names of `name`.
async fn on_own_server(name: &str) -> (RedisServer, RedisLock, LockKey, LockKeys) {
    let server = servers(1, RedisOptions::default()).await.pop().unwrap();
    let lock = connect(&format!("{}?{STATE_TTL}", server.url())).await;
    let key = LockKey::new(name).unwrap();
    let keys = LockKeys::new(distlock_redis::DEFAULT_NAMESPACE, &key);
    (server, lock, key, keys)
}

/// Waits until nothing of the names under `prefix` is left on the server.
async fn collected(lock: &RedisLock, prefix: &str) {
    eventually(COLLECTED_WITHIN, "the name's state collected", || async {
        let inspect = lock.inspect().unwrap();
        inspect.state_records(prefix).await.unwrap() == Some(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_after_a_collection_even_when_the_server_clock_steps_back() {
    let clock = MovableClock::new().expect("cc builds the clock shim");
    let options = RedisOptions {
        clock: Some(clock.clone()),
        ..RedisOptions::default()
    };
    let server = servers(1, options).await.pop().unwrap();
    let lock = connect(&format!("{}?{STATE_TTL}", server.url())).await;
    let key = LockKey::new("orders/42").unwrap();
    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(use_once(&lock, &key).await);
    }
    collected(&lock, "orders/").await;
    clock.set_back(Duration::from_secs(3600)).unwrap();
    // The clock alone would now seed every counter an hour below its tokens.
    let mut conn = admin(&server).await;
    let time: Vec<String> = raw(&mut conn, &["TIME"]).await;
    let now_us: u64 = format!("{}{:0>6}", time[0], time[1]).parse().unwrap();
    assert!(
        before.iter().flatten().all(|t| now_us < t.get()),
        "the clock did not step back"
    );
    let after = use_once(&lock, &key).await;
    for (i, token) in after.iter().enumerate() {
        let earlier: Vec<_> = before.iter().map(|round| round[i]).collect();
        assert!(
            earlier.iter().all(|t| token > t),
            "#{i}: {token} after {earlier:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_the_previous_release_wrote_gets_an_expiry_and_keeps_rising() {
    let (server, lock, key, keys) = on_own_server("legacy").await;
    let mut conn = admin(&server).await;
    // As the previous release left it: a counter without expiry.
    let _: () = raw(&mut conn, &["SET", &keys.fence, "1800000000000000"]).await;
    let lease = lock.acquire(&key, &opts(TTL, Wait::No)).await.unwrap();
    assert_eq!(lease.token().get(), 1_800_000_000_000_001);
    let pttl: i64 = raw(&mut conn, &["PTTL", &keys.fence]).await;
    assert!(
        (2000..=3000).contains(&pttl),
        "counter kept {pttl} ms, not ttl + state_ttl"
    );
    lease.release().await.unwrap();
    collected(&lock, "legacy").await;
    let again = lock.acquire(&key, &opts(TTL, Wait::No)).await.unwrap();
    assert!(
        again.token().get() > 1_800_000_000_000_001,
        "{}",
        again.token()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_name_keeps_its_counter_past_state_ttl() {
    let (server, lock, key, keys) = on_own_server("held").await;
    let o = opts(TTL, Wait::No).renewal(Renewal::Auto);
    let lease = lock.acquire(&key, &o).await.unwrap();
    // Renewed every ttl/3, each renewal keeping the counter ttl + state_ttl.
    tokio::time::sleep(TTL + Duration::from_secs(4)).await;
    assert!(lease.is_held());
    let mut conn = admin(&server).await;
    let exists: i64 = raw(&mut conn, &["EXISTS", &keys.fence]).await;
    assert_eq!(exists, 1, "the counter of a held name expired");
    let token = lease.token();
    lease.release().await.unwrap();
    let next = lock.acquire(&key, &opts(TTL, Wait::No)).await.unwrap();
    assert_eq!(next.token().get(), token.get() + 1);
}
