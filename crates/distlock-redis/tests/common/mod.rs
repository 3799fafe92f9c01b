//! Shared by the adapter tests: real servers from the testkit, a raw admin
//! connection to read what the server itself counts, and the steps of the
//! restart tests.
// Test helpers: a failed set-up fails the test that called it.
#![allow(dead_code, clippy::expect_used)]

use distlock_core::{
    AcquireOptions, DistributedLock, Lease, LockError, LockKey, LossReason, Permit, RwLease, Wait,
};
use distlock_testkit::servers::{RedisOptions, RedisServer};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

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

/// One server with append-only persistence: a restart keeps its data.
pub async fn aof_server() -> RedisServer {
    let aof = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    servers(1, aof).await.pop().expect("one server")
}

/// A lock client of `server` with the default settings.
pub async fn client(server: &RedisServer) -> distlock_redis::RedisLock {
    distlock_redis::RedisConfig::from_url(&server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
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

/// A ttl far above [`DETECTION_BOUND`]: a ttl/3 renewal cannot be what
/// notices a restart.
pub const LONG_TTL: Duration = Duration::from_secs(30);

/// Acquire options with `ttl` and `wait`.
pub fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl).wait(wait)
}

/// A lock client of `url`.
pub async fn connect(url: &str) -> distlock_redis::RedisLock {
    distlock_redis::RedisConfig::from_url(url)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A permit (of 2) and a share (a read share, or the write share) of `key`,
/// taken through `lock` with [`LONG_TTL`].
pub async fn permit_and_share(
    lock: &distlock_redis::RedisLock,
    key: &LockKey,
    write: bool,
) -> (Permit, RwLease) {
    let (sem, rw) = (lock.semaphore().unwrap(), lock.rwlock().unwrap());
    let once = opts(LONG_TTL, Wait::No);
    let permit = sem.acquire(key, 2, &once).await.unwrap();
    let share = match write {
        true => rw.write(key, &once).await,
        false => rw.read(key, &once).await,
    };
    (permit, share.unwrap())
}

/// Two clients of `server` with a restart guard of `guard`, which is also
/// their default ttl.
pub async fn guarded_pair(
    server: &RedisServer,
    guard: Duration,
) -> (distlock_redis::RedisLock, distlock_redis::RedisLock) {
    let guard = format!("{}ms", guard.as_millis());
    let url = format!("{}?restart_guard={guard}&ttl={guard}", server.url());
    (connect(&url).await, connect(&url).await)
}

/// Waits up to `bound` for the holder watched by `lost` to lose its lease as
/// revoked; returns when it did.
pub async fn revoked_within(lost: JoinHandle<(LossReason, Instant)>, bound: Duration) -> Instant {
    let (reason, lost_at) = tokio::time::timeout(bound, lost)
        .await
        .expect("lost() must fire within the bound")
        .expect("loss watcher");
    assert_eq!(reason, LossReason::Revoked);
    lost_at
}

/// How soon after a server is back a holder must know it lost its lease: far
/// below the renewal interval of the long ttls the restart tests use.
pub const DETECTION_BOUND: Duration = Duration::from_secs(2);
/// The longest two holders may both believe they hold a lock after a restart
/// without a guard (until the first one notices).
pub const MAX_OVERLAP: Duration = Duration::from_millis(500);

/// Kills `server` (a crash: no clean shutdown) and starts it again on the same
/// port; without persistence it comes back empty. Returns when the kill was
/// sent and when the server answers again.
pub async fn crash_and_restart(server: &RedisServer) -> (Instant, Instant) {
    let killed_at = Instant::now();
    server.kill();
    server.restart().await.expect("restart on the same port");
    (killed_at, Instant::now())
}

/// Spawns a task that records when `lease` is lost and why.
pub fn watch_loss(lease: &Lease) -> JoinHandle<(LossReason, Instant)> {
    let lost = lease.lost();
    tokio::spawn(async move { (lost.await, Instant::now()) })
}

/// `a` relative to `b`, signed, for printing.
pub fn after(a: Instant, b: Instant) -> String {
    match a.checked_duration_since(b) {
        Some(d) => format!("+{d:?}"),
        None => format!("-{:?}", b - a),
    }
}

/// Asserts that `lock` is refused `key` at once (`Busy`), then waits up to
/// `wait` for it. Returns when it asked, the lease and when it got it.
pub async fn refused_then_granted(
    lock: &dyn DistributedLock,
    key: &LockKey,
    ttl: Duration,
    wait: Duration,
) -> (Instant, Lease, Instant) {
    let opts = AcquireOptions::new().ttl(ttl);
    refused_then_granted_by(wait, |w| {
        let opts = opts.clone().wait(w);
        async move { lock.acquire(key, &opts).await }
    })
    .await
}

/// [`refused_then_granted`] for any primitive: `acquire(wait)` takes a lock,
/// a permit or a share.
pub async fn refused_then_granted_by<T, F, Fut>(wait: Duration, acquire: F) -> (Instant, T, Instant)
where
    T: std::fmt::Debug,
    F: Fn(Wait) -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let asked_at = Instant::now();
    let refused = acquire(Wait::No).await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    let granted = acquire(Wait::For(wait))
        .await
        .expect("granted after waiting");
    (asked_at, granted, Instant::now())
}

/// Asserts that the holder watched by `a_lost` lost its lease as revoked,
/// within `bound` of `back_at` (the server answering again) and before `b_at`
/// (someone else got the lock). Returns when it was lost.
pub async fn lost_in_time(
    a_lost: JoinHandle<(LossReason, Instant)>,
    back_at: Instant,
    b_at: Instant,
    bound: Duration,
) -> Instant {
    let (reason, a_lost_at) = a_lost.await.expect("loss watcher");
    assert_eq!(reason, LossReason::Revoked);
    assert!(
        a_lost_at <= back_at + bound,
        "the holder noticed only {} after the server was back",
        after(a_lost_at, back_at)
    );
    assert!(a_lost_at < b_at, "B got in before A knew it had lost");
    a_lost_at
}

/// Waits (at most [`DETECTION_BOUND`]) for the holder watched by `a_lost` to
/// lose its lease as revoked, and asserts that it overlapped the second holder,
/// who got the lock at `b_at`, by less than [`MAX_OVERLAP`]. Returns when the
/// first holder knew, and the overlap.
pub async fn overlap_with(
    a_lost: JoinHandle<(LossReason, Instant)>,
    b_at: Instant,
) -> (Instant, Duration) {
    let (reason, a_lost_at) = tokio::time::timeout(DETECTION_BOUND, a_lost)
        .await
        .expect("the first holder notices within the detection bound")
        .expect("loss watcher");
    assert_eq!(reason, LossReason::Revoked);
    let overlap = a_lost_at.saturating_duration_since(b_at);
    assert!(overlap < MAX_OVERLAP, "both held the lock for {overlap:?}");
    (a_lost_at, overlap)
}
