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
//!
//! Then it runs clients contending on one key for a few seconds each, 2 and 8 of
//! them, each taking the lock and releasing it again at once, and prints the
//! hand-offs per second and the hand-off latency (from a holder's release call to
//! another client holding), for `EtcdLock` (with the watches its clients created)
//! and, on the same server, for etcd's own server-side Lock API
//! (`LockClient::lock`/`unlock` with a lease per client).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use criterion::Criterion;
use distlock_core::toolkit::Inspect;
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::servers::EtcdServer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

const SAMPLES: usize = 1000;
const NAMESPACE: &str = "bench/";
/// How long each contention run lasts.
const CONTENTION: Duration = Duration::from_secs(3);

struct Env {
    server: EtcdServer,
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
        server,
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

/// One contender: an `EtcdLock` client, or an etcd client using etcd's own Lock API
/// with a lease of its own.
enum Contender {
    Ours(EtcdLock),
    Native(Box<distlock_etcd::client::LockClient>, i64),
}

impl Contender {
    async fn connect(server: &EtcdServer, native: bool) -> Self {
        if !native {
            let lock = EtcdConfig::new([server.addr().to_string()])
                .namespace(NAMESPACE)
                .connect()
                .await;
            return Contender::Ours(lock.expect("connect"));
        }
        let client =
            distlock_etcd::client::Client::connect([format!("http://{}", server.addr())], None)
                .await
                .expect("connect");
        // Long enough for one run without keep-alives.
        let lease = client.lease_client().grant(60).await.expect("grant");
        Contender::Native(Box::new(client.lock_client()), lease.id())
    }

    /// Takes the lock on `name`, calls `held`, and releases it.
    async fn turn(&mut self, name: &LockKey, held: impl FnOnce()) {
        match self {
            Contender::Ours(lock) => {
                let lease = lock.acquire(name, &opts()).await.expect("acquire");
                held();
                lease.release().await.expect("release");
            }
            Contender::Native(client, lease) => {
                let name = format!("{NAMESPACE}native/{name}");
                let locked = client.lock(name, *lease).await.expect("lock");
                held();
                client.unlock(locked.key()).await.expect("unlock");
            }
        }
    }
}

/// What one contention run measured.
struct Run {
    /// Hand-offs per second.
    rate: f64,
    /// Each hand-off's latency, from the holder's release call to another client
    /// holding (taking back one's own released lock is not a hand-off).
    samples: Vec<Duration>,
    /// Watches the `EtcdLock` clients created, warm-up included.
    created: u64,
}

/// `clients` contenders on one key for [`CONTENTION`].
async fn contention(server: &EtcdServer, clients: usize, native: bool) -> Run {
    let mut contenders = Vec::new();
    for _ in 0..clients {
        contenders.push(Contender::connect(server, native).await);
    }
    let name = LockKey::new(format!("contended-{clients}")).unwrap();
    let last: Arc<Mutex<Option<(Instant, usize)>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let end = Instant::now() + CONTENTION;
    let mut tasks = Vec::new();
    for (me, mut contender) in contenders.into_iter().enumerate() {
        let (name, last, handoffs) = (name.clone(), last.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                contender
                    .turn(&name, || {
                        let got = Instant::now();
                        let mut last = last.lock().unwrap();
                        let from = last.take().filter(|(_, from)| *from != me);
                        if let Some((at, _)) = from.filter(|_| got < end) {
                            handoffs.lock().unwrap().push(got - at);
                        }
                        // Taken just before the release call.
                        *last = Some((Instant::now(), me));
                    })
                    .await;
            }
            contender
        }));
    }
    let mut created = 0;
    for task in tasks {
        if let Contender::Ours(lock) = task.await.expect("contender") {
            created += lock.backend().stats().watches_created;
        }
    }
    let samples = std::mem::take(&mut *handoffs.lock().unwrap());
    let rate = samples.len() as f64 / CONTENTION.as_secs_f64();
    Run {
        rate,
        samples,
        created,
    }
}

fn contended(rt: &Runtime, env: &Env) {
    rt.block_on(async {
        println!("\ncontention on one key, {CONTENTION:?} per run, same server");
        for clients in [2, 8] {
            for (label, native) in [("EtcdLock", false), ("etcd Lock API", true)] {
                let mut run = contention(&env.server, clients, native).await;
                if run.samples.is_empty() {
                    println!("{label:<14} {clients} clients: no hand-off");
                    continue;
                }
                let created = if native {
                    String::new()
                } else {
                    format!("  {} watches created", run.created)
                };
                println!(
                    "{label:<14} {clients} clients: {:>6.0} hand-offs/s  p50 {:>9.1?}  p99 {:>9.1?}{created}",
                    run.rate,
                    p(&mut run.samples, 0.5),
                    p(&mut run.samples, 0.99)
                );
            }
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
    contended(&rt, &env);
}
