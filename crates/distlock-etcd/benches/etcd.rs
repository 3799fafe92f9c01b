//! EtcdLock latency next to a raw etcd `Get` round trip, in the same run, on an etcd
//! started by the testkit.
//!
//! `cargo bench -p distlock-etcd --bench etcd` runs the criterion group, then prints
//! p50/p99 from its own samples:
//! - `raw_get`: one linearizable `Get` (the adapter's `Inspect::ping`), the floor
//!   every etcd request pays;
//! - `uncontended_cycle`: acquire + release (two transactions);
//! - `handoff`: from the holder's release call to the queued waiter's acquire
//!   returning (the release, then the watch event that wakes the waiter, then its
//!   one-transaction re-check).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use criterion::Criterion;
use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::servers::EtcdServer;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

const SAMPLES: usize = 1000;
const NAMESPACE: &str = "bench/";

struct Env {
    _server: EtcdServer,
    holder: Arc<EtcdLock>,
    waiter: Arc<EtcdLock>,
}

async fn start() -> Env {
    let server = EtcdServer::start()
        .await
        .expect("etcd: sudo scripts/install-backends");
    let connect = || async {
        let lock = EtcdConfig::new([server.addr().to_string()])
            .namespace(NAMESPACE)
            .connect()
            .await;
        Arc::new(lock.expect("connect"))
    };
    let (holder, waiter) = (connect().await, connect().await);
    Env {
        _server: server,
        holder,
        waiter,
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever)
}

async fn raw_get(lock: &EtcdLock) {
    lock.backend().ping().await.expect("get");
}

async fn cycle(lock: &EtcdLock, key: &LockKey) {
    lock.acquire(key, &opts())
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

/// One hand-off: the holder takes the lock, the waiter queues behind it, and the
/// time from the release call to the waiter holding the lock is returned.
async fn handoff(env: &Env, key: &LockKey) -> Duration {
    let held = env.holder.acquire(key, &opts()).await.expect("acquire");
    let (waiter, waiter_key) = (env.waiter.clone(), key.clone());
    let waiting = tokio::spawn(async move {
        let lease = waiter
            .acquire(&waiter_key, &opts())
            .await
            .expect("waiter acquire");
        (Instant::now(), lease)
    });
    // Release only once the waiter's key is in the queue, so a watch is parked.
    let inspect = env.holder.backend();
    while inspect.residue(key.as_str()).await.expect("residue").len() < 2 {
        tokio::task::yield_now().await;
    }
    let released_at = Instant::now();
    held.release().await.expect("release");
    let (acquired_at, lease) = waiting.await.expect("waiter task");
    lease.release().await.expect("waiter release");
    acquired_at - released_at
}

fn benches(c: &mut Criterion, rt: &Runtime, env: &Env) {
    let (key, contended) = (
        LockKey::new("uncontended").unwrap(),
        LockKey::new("handoff").unwrap(),
    );
    let mut group = c.benchmark_group("etcd");
    group.bench_function("raw_get", |b| b.to_async(rt).iter(|| raw_get(&env.holder)));
    group.bench_function("uncontended_cycle", |b| {
        b.to_async(rt).iter(|| cycle(&env.holder, &key))
    });
    group.bench_function("handoff", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let contended = contended.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += handoff(env, &contended).await;
                }
                total
            }
        })
    });
    group.finish();
}

fn p(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

fn percentiles(rt: &Runtime, env: &Env) {
    rt.block_on(async {
        let (key, contended) = (
            LockKey::new("p-uncontended").unwrap(),
            LockKey::new("p-handoff").unwrap(),
        );
        let mut raw = Vec::with_capacity(SAMPLES);
        let mut cycles = Vec::with_capacity(SAMPLES);
        let mut handoffs = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let started = Instant::now();
            raw_get(&env.holder).await;
            raw.push(started.elapsed());
            let started = Instant::now();
            cycle(&env.holder, &key).await;
            cycles.push(started.elapsed());
            handoffs.push(handoff(env, &contended).await);
        }
        println!("\nlatency percentiles, {SAMPLES} samples each, interleaved");
        for (name, samples) in [
            ("raw Get", &mut raw),
            ("uncontended cycle", &mut cycles),
            ("hand-off", &mut handoffs),
        ] {
            println!(
                "{name:<20} p50 {:>9.1?}  p99 {:>9.1?}",
                p(samples, 0.5),
                p(samples, 0.99)
            );
        }
    });
}

fn main() {
    let rt = Runtime::new().expect("runtime");
    let env = rt.block_on(start());
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion, &rt, &env);
    criterion.final_summary();
    percentiles(&rt, &env);
}
