//! `distlock bench`: latency and throughput of lock cycles, beside the
//! backend's protocol floor measured in the same run, on the same number of
//! connections, with the requests the server itself counted for each line.
//!
//! Phases (of `--duration`): 10% protocol floor (the write sequence the
//! backend's protocol needs for one cycle, sent raw: `Inspect::floor_cycle`,
//! each client on a key of its own), 10% read round trip (`Inspect::ping`, a
//! second reference), 40% uncontended cycles (each client on a key of its own),
//! 40% contended hand-off (all clients on `--keys` keys). Hand-off latency is
//! the time from a holder starting its release to another client having the
//! lock: release, wake-up and acquire together. Around each phase the server's
//! request counter (`Inspect::server_requests`) is read, so each line also says
//! how many requests one operation cost the server.

mod counter;
mod names;
mod report;

use crate::args::{UrlArg, no_inspect, parse_positive_duration, run_prefix};
use crate::exit::{self, Failure};
use crate::plot;
use crate::progress::Progress;
use crate::stats::{Samples, Summary};
use counter::Counter;
use distlock::toolkit::Inspect;
use distlock::{AcquireOptions, DynLock, LockError, LockKey, Wait};
use report::Report;
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
    /// Instead: lock this many distinct names once each, and print the server's
    /// memory and per-name records before, at the peak and after state_ttl.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..),
          conflicts_with_all = ["duration", "keys", "json", "plot"])]
    names: Option<u64>,
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
    if let Some(count) = args.names {
        return names::run(&args.url, count, connect_all(&url, args.clients).await?).await;
    }
    // An unwritable chart path is refused before the benchmark spends its time.
    let mut chart = args.plot.as_deref().map(open_chart).transpose()?;
    let clients = connect_all(&url, args.clients).await?;
    let backend = clients[0].name();
    let inspect = clients[0].inspect();
    if inspect.is_none() {
        eprintln!("distlock: no protocol floor: {}", no_inspect(&clients[0]));
    }
    let floor = inspect.and_then(|inspect| inspect.floor());
    let read_name = inspect.and_then(|inspect| inspect.ping_name());
    // Without a network (memory://) there is no reference to time.
    let references = u32::from(floor.is_some()) + u32::from(read_name.is_some());
    let reference_time = args.duration / 10;
    let phase_time = (args.duration - reference_time * references) / 2;
    // The ttl the cycles below acquire with, so the floor uses the same lease.
    let ttl = AcquireOptions::DEFAULT_TTL;
    let counter = Counter::start(inspect).await;
    let counter = counter.as_ref();
    let mut progress = Progress::new(args.duration);
    let mut report = Report::new(backend, &url, args.clients, args.keys, args.duration);
    if let Some(floor) = floor {
        progress.phase("protocol floor", reference_time);
        // The protocol floor: each client's cheapest full cycle, as fast as it goes.
        let phase = own_key_phase(
            "floor",
            &clients,
            reference_time,
            &progress,
            |lock, key, end| async move {
                repeat_inspecting(&lock, end, |inspect| inspect.floor_cycle(&key, ttl)).await
            },
        )?;
        report.floor(floor, Counter::around(counter, phase).await);
    }
    if let Some(name) = read_name {
        progress.phase("read round trip", reference_time);
        let phase = read_phase(&clients, reference_time, &progress);
        report.read(name, Counter::around(counter, phase).await);
    }
    progress.phase("uncontended", phase_time);
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)));
    let phase = own_key_phase("own", &clients, phase_time, &progress, |lock, key, end| {
        let opts = opts.clone();
        async move {
            repeat_until(end, || async {
                let lease = lock.acquire(&key, &opts).await?;
                lease.release().await
            })
            .await
        }
    })?;
    report.uncontended(Counter::around(counter, phase).await);
    progress.phase("hand-off", phase_time);
    let phase = handoff_phase(&clients, args.keys, phase_time, &progress)?;
    report.handoff(Counter::around(counter, phase).await);
    progress.finish();

    match args.json {
        true => println!("{}", report.json()),
        false => print!("{}", report.table()),
    }
    for (label, line) in report.lines() {
        if let Some(error) = &line.phase.first_error {
            eprintln!(
                "distlock: {label}: {} errors, first: {error}",
                line.phase.errors
            );
        }
    }
    if let (Some(path), Some(chart)) = (&args.plot, chart.as_mut()) {
        let points = plot::percentile_points();
        let series: Vec<_> = report
            .lines_mut()
            .map(|(label, line)| (label, line.phase.samples.curve(&points)))
            .collect();
        chart
            .write_all(plot::latency_chart(&report.heading(), &series).as_bytes())
            .map_err(|e| {
                Failure::new(
                    exit::FAILURE,
                    format!("cannot write the plot to {}: {e}", path.display()),
                )
            })?;
        eprintln!("distlock: latency chart written to {}", path.display());
    }
    if !report.cycles_completed() {
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

/// [`repeat_until`] with `op` on `lock`'s server-side inspection; a backend
/// without one fails the task once.
async fn repeat_inspecting<'l, F, Fut>(lock: &'l DynLock, end: Instant, mut op: F) -> TaskResult
where
    F: FnMut(&'l dyn Inspect) -> Fut,
    Fut: Future<Output = Result<(), LockError>>,
{
    match lock.inspect() {
        Some(inspect) => repeat_until(end, || op(inspect)).await,
        None => {
            let mut result = TaskResult::default();
            result.error(no_inspect(lock));
            result
        }
    }
}

/// A phase in which each client works on a key of its own (`what/<i>`):
/// `work` gets the client, its key and the phase's end.
fn own_key_phase<'a, F, Fut>(
    what: &str,
    clients: &'a [DynLock],
    length: Duration,
    progress: &'a Progress,
    work: F,
) -> Result<impl Future<Output = Phase> + 'a, LockError>
where
    F: Fn(DynLock, LockKey, Instant) -> Fut + 'a,
    Fut: Future<Output = TaskResult> + Send + 'static,
{
    let keys = keys(what, clients.len())?;
    Ok(phase(clients.len(), length, progress, move |i, end| {
        work(clients[i].clone(), keys[i].clone(), end)
    }))
}

/// Each client's own connection, timing the backend's cheapest read.
fn read_phase<'a>(
    clients: &'a [DynLock],
    length: Duration,
    progress: &'a Progress,
) -> impl Future<Output = Phase> + 'a {
    phase(clients.len(), length, progress, |i, end| {
        let lock = clients[i].clone();
        async move { repeat_inspecting(&lock, end, |inspect| inspect.ping()).await }
    })
}

fn handoff_phase<'a>(
    clients: &'a [DynLock],
    keys: u32,
    length: Duration,
    progress: &'a Progress,
) -> Result<impl Future<Output = Phase> + 'a, LockError> {
    let shared = self::keys("shared", keys as usize)?;
    // Per key: when its last holder started releasing, and which client it was.
    let released: Arc<Vec<LastRelease>> = Arc::new((0..keys).map(|_| Mutex::new(None)).collect());
    let phase = phase(clients.len(), length, progress, move |i, end| {
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
    Ok(phase)
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
