//! Uncontended acquire + release per strategy, and the hand-off from a releasing
//! holder to a waiting client, next to a raw `SELECT 1` round trip, all against
//! one MariaDB server launched for the run. Also prints p50/p99 of each from
//! plain samples taken in the same run.
//!
//! `cargo bench -p distlock-mysql` (a quick pass: `-- --quick`).
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::Criterion;
use distlock_core::{AcquireOptions, DynLock, LockKey, Renewal, Wait};
use distlock_mysql::{MySqlConfig, Strategy};
use distlock_testkit::servers::MariaDbServer;
use sqlx::{Connection, MySqlConnection};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

const STRATEGIES: [Strategy; 3] = [
    Strategy::VersionCas,
    Strategy::UniqueInsert,
    Strategy::ForUpdate,
];
const SAMPLES: usize = 300;
const HANDOFF_SAMPLES: usize = 60;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .renewal(Renewal::Manual)
        .wait(Wait::For(Duration::from_secs(10)))
}

async fn client(server: &MariaDbServer, strategy: Strategy) -> DynLock {
    MySqlConfig::from_url(&server.url())
        .expect("launcher URL")
        .strategy(strategy)
        .table(format!("bench_{}", strategy.as_str()))
        .connect()
        .await
        .expect("connect")
}

async fn select_one(conn: &Mutex<MySqlConnection>) {
    let mut conn = conn.lock().await;
    sqlx::query("SELECT 1")
        .execute(&mut *conn)
        .await
        .expect("SELECT 1");
}

async fn cycle(lock: &DynLock, key: &LockKey) {
    let lease = lock
        .acquire(key, &opts())
        .await
        .expect("uncontended acquire");
    lease.release().await.expect("release");
}

/// One hand-off: `holder` releases while `waiter` waits; returns release → acquired.
async fn handoff(holder: &DynLock, waiter: &DynLock, key: &LockKey) -> Duration {
    let lease = holder.acquire(key, &opts()).await.expect("holder acquires");
    let (waiter, waiting_key) = (waiter.clone(), key.clone());
    let task = tokio::spawn(async move {
        let lease = waiter
            .acquire(&waiting_key, &opts())
            .await
            .expect("waiter acquires");
        let at = Instant::now();
        lease.release().await.expect("waiter releases");
        at
    });
    // Let the waiter park (poll strategies back off, for_update queues).
    tokio::time::sleep(Duration::from_millis(30)).await;
    let released = Instant::now();
    lease.release().await.expect("holder releases");
    task.await
        .expect("waiter task")
        .saturating_duration_since(released)
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let runtime = Runtime::new().expect("tokio runtime");
    let server = runtime
        .block_on(MariaDbServer::start())
        .expect("start MariaDB");
    let raw = Mutex::new(
        runtime
            .block_on(MySqlConnection::connect(&server.url()))
            .expect("raw connection"),
    );
    let clients: Vec<(Strategy, DynLock, DynLock)> = STRATEGIES
        .iter()
        .map(|&s| {
            runtime.block_on(async { (s, client(&server, s).await, client(&server, s).await) })
        })
        .collect();
    let key = LockKey::new("bench/cycle").expect("key");
    let handoff_key = LockKey::new("bench/handoff").expect("key");

    let mut c = Criterion::default().configure_from_args();
    c.bench_function("mysql: raw SELECT 1", |b| {
        b.to_async(&runtime).iter(|| select_one(&raw))
    });
    for (strategy, lock, waiter) in &clients {
        c.bench_function(
            &format!("mysql {}: acquire + release", strategy.as_str()),
            |b| b.to_async(&runtime).iter(|| cycle(lock, &key)),
        );
        c.bench_function(&format!("mysql {}: hand-off", strategy.as_str()), |b| {
            let handoff_key = &handoff_key;
            b.to_async(&runtime).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += handoff(lock, waiter, handoff_key).await;
                }
                total
            })
        });
    }

    // The same operations as plain samples, for tail latency.
    let sample = |name: String, samples: Vec<Duration>| {
        let (p50, p99) = percentiles(samples);
        println!("{name:<36} p50 {p50:>10.3?}   p99 {p99:>10.3?}");
    };
    println!("\nlatency from {SAMPLES} samples each ({HANDOFF_SAMPLES} for hand-offs):");
    let raw_samples = runtime.block_on(async {
        let mut out = Vec::new();
        for _ in 0..SAMPLES {
            let start = Instant::now();
            select_one(&raw).await;
            out.push(start.elapsed());
        }
        out
    });
    sample("raw SELECT 1".into(), raw_samples);
    for (strategy, lock, waiter) in &clients {
        let (cycles, handoffs) = runtime.block_on(async {
            let mut cycles = Vec::new();
            for _ in 0..SAMPLES {
                let start = Instant::now();
                cycle(lock, &key).await;
                cycles.push(start.elapsed());
            }
            let mut handoffs = Vec::new();
            for _ in 0..HANDOFF_SAMPLES {
                handoffs.push(handoff(lock, waiter, &handoff_key).await);
            }
            (cycles, handoffs)
        });
        sample(format!("{} acquire + release", strategy.as_str()), cycles);
        sample(format!("{} hand-off", strategy.as_str()), handoffs);
    }
    c.final_summary();
    drop(clients);
    runtime.block_on(server.stop());
}
