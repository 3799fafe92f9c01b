//! Latency of the ZooKeeper adapter next to the raw round trip it is built on,
//! measured in the same run against a server launched by the testkit (or
//! `DISTLOCK_TEST_ZOOKEEPER_URL`):
//!
//! - `raw exists`: one `exists` request on a plain session, the floor;
//! - `uncontended cycle`: acquire + release, three requests (create, list, delete);
//! - `hand-off`: from the holder's release to the waiter's acquire returning
//!   (delete, the watch notification, the waiter's list).
//!
//! Before criterion's runs it prints p50/p99 of 1000 timed samples of each.
//! `cargo bench -p distlock-zookeeper`. Benchmarks report; they do not assert.
// A benchmark has nothing to recover to: any failure aborts it with its reason.
#![allow(clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_testkit::servers::{ZooKeeperServer, external_url};
use distlock_zookeeper::{ZkConfig, ZkLock};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (_server, endpoint) = runtime.block_on(async {
        match external_url("zookeeper") {
            Some(url) => {
                let config = ZkConfig::from_url(&url).expect("DISTLOCK_TEST_ZOOKEEPER_URL");
                (None, config.endpoints.join(","))
            }
            None => {
                let server = ZooKeeperServer::start()
                    .await
                    .expect("start ZooKeeper (sudo scripts/install-backends)");
                let url = server.url();
                (Some(server), url)
            }
        }
    });
    let config = ZkConfig {
        endpoints: vec![endpoint.clone()],
        namespace: "distlock-bench".into(),
        ..ZkConfig::default()
    };
    let connect = || runtime.block_on(config.clone().connect()).expect("connect");
    let (holder, waiter): (Arc<ZkLock>, Arc<ZkLock>) = (Arc::new(connect()), Arc::new(connect()));
    let raw = runtime
        .block_on(
            zk::Client::connector()
                .with_session_timeout(Duration::from_secs(30))
                .connect(&endpoint),
        )
        .expect("raw session");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(10)));
    let key = LockKey::new("bench").expect("key");
    let dir = holder.backend().lock_dir(key.as_str());
    // Creates the lock directory, so every measured cycle is the steady state.
    runtime
        .block_on(async { holder.acquire(&key, &opts).await?.release().await })
        .expect("first cycle");

    runtime.block_on(async {
        const SAMPLES: usize = 1000;
        let mut exists = Vec::with_capacity(SAMPLES);
        let mut cycle = Vec::with_capacity(SAMPLES);
        let mut handoff = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let started = Instant::now();
            black_box(raw.check_stat(&dir).await.expect("exists"));
            exists.push(started.elapsed());
            let started = Instant::now();
            holder
                .acquire(&key, &opts)
                .await
                .expect("acquire")
                .release()
                .await
                .expect("release");
            cycle.push(started.elapsed());
            handoff.push(hand_off(&holder, &waiter, &raw, &key, &opts, &dir).await);
        }
        for (name, samples) in [
            ("raw exists", exists),
            ("uncontended cycle", cycle),
            ("hand-off", handoff),
        ] {
            let (p50, p99) = percentiles(samples);
            println!("zookeeper/{name}: p50 {p50:?} p99 {p99:?} ({SAMPLES} samples)");
        }
    });

    let mut group = c.benchmark_group("zookeeper");
    group.bench_function("raw exists", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(raw.check_stat(&dir).await.expect("exists")) });
    });
    group.bench_function("uncontended cycle", |b| {
        b.to_async(&runtime).iter(|| async {
            let lease = holder.acquire(&key, &opts).await.expect("acquire");
            black_box(lease.token());
            lease.release().await.expect("release");
        });
    });
    group.bench_function("hand-off", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let (holder, waiter, raw, key, opts, dir) = (
                holder.clone(),
                waiter.clone(),
                raw.clone(),
                key.clone(),
                opts.clone(),
                dir.clone(),
            );
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += hand_off(&holder, &waiter, &raw, &key, &opts, &dir).await;
                }
                total
            }
        });
    });
    group.finish();
}

/// One hand-off: the time from the holder's release to the queued waiter's
/// acquire returning.
async fn hand_off(
    holder: &ZkLock,
    waiter: &Arc<ZkLock>,
    raw: &zk::Client,
    key: &LockKey,
    opts: &AcquireOptions,
    dir: &str,
) -> Duration {
    let lease = holder.acquire(key, opts).await.expect("holder acquire");
    let (waiter, waiter_key, waiter_opts) = (waiter.clone(), key.clone(), opts.clone());
    let task = tokio::spawn(async move {
        let lease = waiter
            .acquire(&waiter_key, &waiter_opts)
            .await
            .expect("waiter acquire");
        (Instant::now(), lease)
    });
    // Not measured: wait until the waiter's node is queued.
    while raw.list_children(dir).await.expect("list").len() < 2 {
        tokio::task::yield_now().await;
    }
    let released_at = Instant::now();
    lease.release().await.expect("release");
    let (acquired_at, next) = task.await.expect("waiter task");
    next.release().await.expect("waiter release");
    acquired_at - released_at
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

criterion_group!(benches, bench);
criterion_main!(benches);
