//! `distlock bench`: latency and throughput of lock cycles, beside the backend's
//! raw round trip measured in the same run, on the same number of connections.
//!
//! Phases (of `--duration`): 10% raw round trips, 45% uncontended cycles (each
//! client on a key of its own), 45% contended hand-off (all clients on `--keys`
//! keys). Hand-off latency is the time from a holder starting its release to
//! another client having the lock: release, wake-up and acquire together.

use crate::args::{UrlArg, no_inspect, parse_positive_duration, run_prefix, show};
use crate::exit::{self, Failure};
use crate::plot;
use crate::progress::Progress;
use crate::stats::{Samples, Summary};
use distlock::{AcquireOptions, DynLock, LockError, LockKey, Wait};
use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Total running time, split over the phases.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    duration: Duration,
    /// Concurrent clients, each with its own connections.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    clients: u32,
    /// Keys the clients contend on in the hand-off phase (1: all on one key).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    keys: u32,
    /// Print the results as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a latency-by-percentile chart (SVG) to this file.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// Per hand-off key: when its last holder started releasing, and which client.
type LastRelease = Mutex<Option<(Instant, usize)>>;

/// What one phase measured.
struct Phase {
    summary: Summary,
    samples: Samples,
    errors: usize,
    first_error: Option<String>,
}

/// What one task of a phase measured.
#[derive(Default)]
struct TaskResult {
    samples: Samples,
    ops: usize,
    errors: usize,
    first_error: Option<String>,
}

impl TaskResult {
    fn error(&mut self, e: impl ToString) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }
}

pub async fn bench(args: BenchArgs) -> Result<u8, Failure> {
    let url = args.url.require()?.to_owned();
    // An unwritable chart path is refused before the benchmark spends its time.
    let mut chart = args.plot.as_deref().map(open_chart).transpose()?;
    let clients = connect_all(&url, args.clients).await?;
    let backend = clients[0].name();
    let inspect = clients[0].inspect();
    if inspect.is_none() {
        eprintln!("distlock: no raw round trip: {}", no_inspect(&clients[0]));
    }
    let raw_name = inspect.and_then(|inspect| inspect.ping_name());
    // Without a network (memory://) there is no raw round trip to time.
    let (raw_time, phase_time) = match raw_name {
        Some(_) => (args.duration / 10, args.duration * 9 / 20),
        None => (Duration::ZERO, args.duration / 2),
    };
    let mut progress = Progress::new(args.duration);
    let mut raw = None;
    if raw_name.is_some() {
        progress.phase("raw round trip", raw_time);
        raw = Some(raw_phase(&clients, raw_time, &progress).await);
    }
    progress.phase("uncontended", phase_time);
    let mut uncontended = uncontended_phase(&clients, phase_time, &progress).await?;
    progress.phase("hand-off", phase_time);
    let mut handoff = handoff_phase(&clients, args.keys, phase_time, &progress).await?;
    progress.finish();

    let raw_p50 = raw.as_ref().and_then(|r| r.summary.p50);
    let heading = format!(
        "distlock bench: {backend} at {}, {} clients, {} hand-off key{}, {}",
        distlock::redact_url(&url),
        args.clients,
        args.keys,
        if args.keys == 1 { "" } else { "s" },
        show(args.duration)
    );
    let raw_label = raw_name.map(|n| format!("raw round trip ({n})"));
    let mut rows: Vec<(String, &Phase)> = Vec::new();
    if let (Some(label), Some(raw)) = (&raw_label, &raw) {
        rows.push((label.clone(), raw));
    }
    rows.push(("uncontended cycle".into(), &uncontended));
    rows.push(("contended hand-off".into(), &handoff));
    if args.json {
        println!("{}", json(backend, &url, &args, &rows, raw_p50));
    } else {
        println!("{heading}");
        print_table(&rows, raw_p50);
    }
    for (label, phase) in &rows {
        if let Some(error) = &phase.first_error {
            eprintln!("distlock: {label}: {} errors, first: {error}", phase.errors);
        }
    }
    if let (Some(path), Some(chart)) = (&args.plot, chart.as_mut()) {
        let mut series = Vec::new();
        let points = plot::percentile_points();
        if let (Some(label), Some(raw)) = (raw_label, raw.as_mut()) {
            series.push((label, raw.samples.curve(&points)));
        }
        series.push((
            "uncontended cycle".into(),
            uncontended.samples.curve(&points),
        ));
        series.push(("contended hand-off".into(), handoff.samples.curve(&points)));
        chart
            .write_all(plot::latency_chart(&heading, &series).as_bytes())
            .map_err(|e| {
                Failure::new(
                    exit::FAILURE,
                    format!("cannot write the plot to {}: {e}", path.display()),
                )
            })?;
        eprintln!("distlock: latency chart written to {}", path.display());
    }
    if uncontended.summary.ops == 0 || handoff.summary.ops == 0 {
        return Err(Failure::new(
            exit::FAILURE,
            "no lock cycle completed; see the errors above",
        ));
    }
    Ok(exit::OK)
}

async fn connect_all(url: &str, clients: u32) -> Result<Vec<DynLock>, Failure> {
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(distlock::connect(url).await?);
    }
    Ok(all)
}

/// Runs `task(i)` for every client until `length` is over, redrawing the progress
/// bar meanwhile; merges what the tasks measured.
async fn phase<F, Fut>(count: usize, length: Duration, progress: &Progress, task: F) -> Phase
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = TaskResult> + Send + 'static,
{
    let started = Instant::now();
    let end = started + length;
    let mut tasks = JoinSet::new();
    for i in 0..count {
        tasks.spawn(task(i, end));
    }
    let mut merged = TaskResult::default();
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(Ok(result)) => {
                    merged.samples.extend(result.samples);
                    merged.ops += result.ops;
                    merged.errors += result.errors;
                    if merged.first_error.is_none() {
                        merged.first_error = result.first_error;
                    }
                }
                Some(Err(e)) => merged.error(format!("a bench task failed: {e}")),
                None => break,
            },
            _ = ticker.tick() => progress.draw(),
        }
    }
    let mut summary = Summary::of(&mut merged.samples, started.elapsed());
    summary.ops = merged.ops;
    summary.per_second = merged.ops as f64 / started.elapsed().as_secs_f64().max(1e-9);
    Phase {
        summary,
        samples: merged.samples,
        errors: merged.errors,
        first_error: merged.first_error,
    }
}

/// Repeats `op` until `end`, timing every success.
async fn repeat_until<F, Fut, E>(end: Instant, mut op: F) -> TaskResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: ToString,
{
    let mut result = TaskResult::default();
    while Instant::now() < end {
        let t0 = Instant::now();
        match op().await {
            Ok(()) => {
                result.samples.push(t0.elapsed());
                result.ops += 1;
            }
            Err(e) => result.error(e),
        }
    }
    result
}

/// `count` keys of one phase, `{prefix}/{what}/{i}`.
fn keys(what: &str, count: usize) -> Result<Vec<LockKey>, LockError> {
    let prefix = run_prefix("bench");
    (0..count)
        .map(|i| LockKey::new(format!("{prefix}/{what}/{i}")))
        .collect()
}

/// Each client's own connection, timing the backend's cheapest native request.
async fn raw_phase(clients: &[DynLock], length: Duration, progress: &Progress) -> Phase {
    phase(clients.len(), length, progress, |i, end| {
        let lock = clients[i].clone();
        async move {
            match lock.inspect() {
                Some(inspect) => repeat_until(end, || inspect.ping()).await,
                None => {
                    let mut result = TaskResult::default();
                    result.error(no_inspect(&lock));
                    result
                }
            }
        }
    })
    .await
}

async fn uncontended_phase(
    clients: &[DynLock],
    length: Duration,
    progress: &Progress,
) -> Result<Phase, LockError> {
    let keys = keys("own", clients.len())?;
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)));
    let phase = phase(clients.len(), length, progress, |i, end| {
        let (lock, key, opts) = (clients[i].clone(), keys[i].clone(), opts.clone());
        async move {
            repeat_until(end, || async {
                let lease = lock.acquire(&key, &opts).await?;
                lease.release().await
            })
            .await
        }
    });
    Ok(phase.await)
}

async fn handoff_phase(
    clients: &[DynLock],
    keys: u32,
    length: Duration,
    progress: &Progress,
) -> Result<Phase, LockError> {
    let shared = self::keys("shared", keys as usize)?;
    // Per key: when its last holder started releasing, and which client it was.
    let released: Arc<Vec<LastRelease>> = Arc::new((0..keys).map(|_| Mutex::new(None)).collect());
    let phase = phase(clients.len(), length, progress, |i, end| {
        let lock = clients[i].clone();
        let slot = i % shared.len();
        let key = shared[slot].clone();
        let released = released.clone();
        async move {
            let mut result = TaskResult::default();
            while let Some(left) = end
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            {
                let opts = AcquireOptions::new().wait(Wait::For(left));
                let lease = match lock.acquire(&key, &opts).await {
                    Ok(lease) => lease,
                    Err(LockError::Timeout { .. }) => break,
                    Err(e) => {
                        result.error(e);
                        continue;
                    }
                };
                let got = Instant::now();
                result.ops += 1;
                {
                    let mut last = released[slot]
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    // A lock passed on from another client is a hand-off; taking
                    // back one's own released lock is not.
                    if let Some((at, _)) = last.take().filter(|(_, from)| *from != i) {
                        result.samples.push(got - at);
                    }
                    *last = Some((Instant::now(), i));
                }
                if let Err(e) = lease.release().await {
                    result.error(e);
                }
            }
            result
        }
    });
    Ok(phase.await)
}

fn print_table(rows: &[(String, &Phase)], raw_p50: Option<Duration>) {
    println!(
        "{:<36} {:>9} {:>10} {:>9} {:>9} {:>9} {:>10}",
        "", "ops", "ops/s", "p50", "p90", "p99", "p50 / raw"
    );
    let cell = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), show);
    for (label, phase) in rows {
        let s = &phase.summary;
        println!(
            "{label:<36} {:>9} {:>10.0} {:>9} {:>9} {:>9} {:>10}",
            s.ops,
            s.per_second,
            cell(s.p50),
            cell(s.p90),
            cell(s.p99),
            ratio(s.p50, raw_p50).map_or_else(|| "-".to_owned(), |r| format!("{r:.1}x")),
        );
    }
}

fn ratio(value: Option<Duration>, raw: Option<Duration>) -> Option<f64> {
    let (value, raw) = (value?, raw?);
    (!raw.is_zero()).then(|| value.as_secs_f64() / raw.as_secs_f64())
}

fn json(
    backend: &str,
    url: &str,
    args: &BenchArgs,
    rows: &[(String, &Phase)],
    raw_p50: Option<Duration>,
) -> String {
    let micros = |d: Option<Duration>| {
        d.map_or_else(
            || "null".to_owned(),
            |d| format!("{:.1}", d.as_secs_f64() * 1e6),
        )
    };
    let phases: Vec<String> = rows
        .iter()
        .map(|(label, phase)| {
            let s = &phase.summary;
            format!(
                r#"{{"phase":{},"ops":{},"ops_per_sec":{:.1},"p50_us":{},"p90_us":{},"p99_us":{},"p50_ratio_to_raw":{},"errors":{}}}"#,
                quote(label),
                s.ops,
                s.per_second,
                micros(s.p50),
                micros(s.p90),
                micros(s.p99),
                ratio(s.p50, raw_p50).map_or_else(|| "null".to_owned(), |r| format!("{r:.2}")),
                phase.errors,
            )
        })
        .collect();
    format!(
        r#"{{"backend":{},"url":{},"clients":{},"keys":{},"duration_secs":{:.3},"phases":[{}]}}"#,
        quote(backend),
        quote(&distlock::redact_url(url)),
        args.clients,
        args.keys,
        args.duration.as_secs_f64(),
        phases.join(",")
    )
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Creates (or truncates) the chart file up front: a directory, a missing
/// folder or a read-only place is a usage error before any work starts.
fn open_chart(path: &Path) -> Result<File, Failure> {
    if path.is_dir() {
        return Err(Failure::usage(format!(
            "--plot {} is a directory; give a file name such as bench.svg",
            path.display()
        )));
    }
    File::create(path).map_err(|e| {
        Failure::usage(format!(
            "--plot {}: cannot create the chart file ({e}); pick a writable path",
            path.display()
        ))
    })
}
