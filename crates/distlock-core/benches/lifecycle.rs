//! The overhead core adds around a backend: one uncontended acquire+release cycle
//! on the in-memory backend, and one manual renewal of a held lease.
//! `cargo bench -p distlock-core`.
#![allow(
    clippy::expect_used,
    reason = "a benchmark that cannot set up should stop loudly"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use distlock_core::memory::MemoryStore;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Renewal};
use std::hint::black_box;
use std::time::Duration;

fn lifecycle(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let lock = MemoryStore::new().client();
    let key = LockKey::new("bench").expect("valid key");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));

    c.bench_function("memory: acquire + release", |b| {
        b.to_async(&runtime).iter(|| async {
            let lease = lock
                .acquire(&key, &opts)
                .await
                .expect("uncontended acquire");
            black_box(lease.token());
            lease.release().await.expect("release");
        });
    });

    let manual = opts.clone().renewal(Renewal::Manual);
    let lease = runtime
        .block_on(lock.acquire(&key, &manual))
        .expect("uncontended acquire");
    c.bench_function("memory: one renewal", |b| {
        b.to_async(&runtime)
            .iter(|| async { lease.renew().await.expect("renew") });
    });
    runtime.block_on(lease.release()).expect("release");
}

criterion_group!(benches, lifecycle);
criterion_main!(benches);
