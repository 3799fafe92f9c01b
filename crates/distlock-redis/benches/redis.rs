//! RedisLock and Redlock latency next to the raw round trip (each client's own
//! `Inspect::ping`: one `PING`, or a `PING` to every node at once), in the same
//! run, on servers started by the testkit.
//!
//! `cargo bench -p distlock-redis --bench redis` runs the criterion groups and
//! then prints p50/p99 per operation from its own samples, with the ratios the
//! issues set targets for.
// A benchmark whose set-up or lock calls fail has nothing to measure: it stops.
#![allow(clippy::expect_used)]

use criterion::Criterion;
use distlock_core::{AcquireOptions, DynLock, LockKey, Wait};
use distlock_redis::{RedisConfig, RedlockConfig};
use distlock_testkit::servers::RedisServer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

const WAITERS: usize = 8;
const SAMPLES: usize = 2000;

struct Env {
    _servers: Vec<RedisServer>,
    redis: DynLock,
    contenders: Vec<DynLock>,
    redlock: DynLock,
}

async fn start() -> Env {
    let servers = RedisServer::start_many(5)
        .await
        .expect("redis-server: sudo scripts/install-backends");
    let connect = |url: String| async move {
        Arc::new(
            RedisConfig::from_url(&url)
                .expect("url")
                .connect()
                .await
                .expect("connect"),
        ) as DynLock
    };
    let redis = connect(servers[0].url()).await;
    let mut contenders = Vec::new();
    for _ in 0..WAITERS {
        contenders.push(connect(servers[0].url()).await);
    }
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = Arc::new(
        RedlockConfig::from_urls(&urls)
            .expect("urls")
            .connect()
            .await
            .expect("connect"),
    ) as DynLock;
    Env {
        _servers: servers,
        redis,
        contenders,
        redlock,
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever)
}

/// The client's raw round trip: `PING`, or for Redlock a `PING` to every node
/// at once, answered by all.
async fn ping(lock: &DynLock) {
    lock.inspect()
        .expect("every adapter offers Inspect")
        .ping()
        .await
        .expect("PING");
}

async fn cycle(lock: &DynLock, key: &LockKey) {
    lock.acquire(key, &opts())
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

/// `count` acquisitions of one key by the contenders, all waiting; returns the
/// time from each release to the next acquisition.
async fn handoffs(contenders: &[DynLock], key: &LockKey, count: u64) -> Vec<Duration> {
    let remaining = Arc::new(AtomicU64::new(count));
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let gaps: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut set = JoinSet::new();
    for lock in contenders {
        let (lock, key) = (lock.clone(), key.clone());
        let (remaining, released_at, gaps) = (remaining.clone(), released_at.clone(), gaps.clone());
        set.spawn(async move {
            while remaining
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                let lease = lock.acquire(&key, &opts()).await.expect("acquire");
                let now = Instant::now();
                if let Some(at) = released_at.lock().expect("lock").take() {
                    gaps.lock().expect("lock").push(now - at);
                }
                *released_at.lock().expect("lock") = Some(Instant::now());
                lease.release().await.expect("release");
            }
        });
    }
    while set.join_next().await.is_some() {}
    gaps.lock().expect("lock").clone()
}

fn benches(c: &mut Criterion, rt: &Runtime, env: &Env) {
    let key = LockKey::new("bench/uncontended").expect("key");
    let mut group = c.benchmark_group("redis");
    group.bench_function("raw_ping", |b| b.to_async(rt).iter(|| ping(&env.redis)));
    group.bench_function("uncontended_cycle", |b| {
        b.to_async(rt).iter(|| cycle(&env.redis, &key))
    });
    let contended = LockKey::new("bench/contended").expect("key");
    group.bench_function("handoff_8_waiters", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (contenders, key) = (env.contenders.clone(), contended.clone());
            async move {
                let started = Instant::now();
                handoffs(&contenders, &key, iters).await;
                started.elapsed()
            }
        })
    });
    group.finish();
    let mut group = c.benchmark_group("redlock");
    group.bench_function("raw_parallel_ping_5", |b| {
        b.to_async(rt).iter(|| ping(&env.redlock))
    });
    group.bench_function("uncontended_cycle", |b| {
        b.to_async(rt).iter(|| cycle(&env.redlock, &key))
    });
    group.finish();
}

async fn sample<F, Fut>(mut op: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        op().await;
        samples.push(started.elapsed());
    }
    samples
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn report(name: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    let (p50, p99) = (percentile(samples, 0.50), percentile(samples, 0.99));
    println!(
        "{name:<34} p50 {:>9.1?}  p99 {:>9.1?}  (n={})",
        p50,
        p99,
        samples.len()
    );
    (p50, p99)
}

fn percentiles(rt: &Runtime, env: &Env) {
    rt.block_on(async {
        let key = LockKey::new("bench/percentiles").expect("key");
        println!("\nlatency percentiles ({SAMPLES} samples each)");
        let (ping50, ping99) = report("redis raw PING", &mut sample(|| ping(&env.redis)).await);
        let (cyc50, cyc99) = report("redis acquire+release", &mut sample(|| cycle(&env.redis, &key)).await);
        let mut gaps = handoffs(&env.contenders, &LockKey::new("bench/handoff").expect("key"), SAMPLES as u64).await;
        report("redis hand-off, 8 waiters", &mut gaps);
        let (pp50, _) = report("5 nodes parallel raw PING", &mut sample(|| ping(&env.redlock)).await);
        let mut acquires = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let started = Instant::now();
            let lease = env.redlock.acquire(&key, &opts()).await.expect("acquire");
            acquires.push(started.elapsed());
            lease.release().await.expect("release");
        }
        let (acq50, _) = report("redlock acquire (incl. fence round)", &mut acquires);
        let (rl50, _) = report("redlock acquire+release", &mut sample(|| cycle(&env.redlock, &key)).await);
        println!(
            "redis cycle / (2 × PING): p50 {:.2}×, p99 {:.2}× (target ≤ 2.5×)",
            cyc50.as_secs_f64() / (2.0 * ping50.as_secs_f64()),
            cyc99.as_secs_f64() / (2.0 * ping99.as_secs_f64())
        );
        println!(
            "redlock acquire / parallel PING round: p50 {:.2}× (2 rounds: acquire, fence raise; N sequential would be 10)",
            acq50.as_secs_f64() / pp50.as_secs_f64()
        );
        println!(
            "redlock cycle / parallel PING round: p50 {:.2}× (3 rounds: acquire, fence raise, release)",
            rl50.as_secs_f64() / pp50.as_secs_f64()
        );
    });
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let env = rt.block_on(start());
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, &rt, &env);
    c.final_summary();
    percentiles(&rt, &env);
}
