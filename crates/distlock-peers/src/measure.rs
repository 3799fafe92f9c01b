//! One cell of the table: some clients of one implementation, either each
//! cycling on a key of its own (acquire + release, as fast as it goes) or all
//! on one key (hand-off: from a holder's release call to another client
//! holding), for a fixed time.

use crate::peers::Peer;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How long a cell runs.
#[derive(Debug, Clone, Copy)]
pub enum Length {
    /// For this long.
    Time(Duration),
    /// Until every client took this many turns.
    Turns(u64),
}

impl std::fmt::Display for Length {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Length::Time(d) => f.write_str(&crate::show(*d)),
            Length::Turns(n) => write!(f, "{n} turns of each client"),
        }
    }
}

/// Turns each client takes on a key of its own before the clock starts:
/// connections, leases, sessions and scripts are set up by then.
const WARM_UP: usize = 3;

/// What one cell measured.
#[derive(Debug, Default)]
pub struct Cell {
    /// Each operation's latency: a whole cycle, or one hand-off.
    pub samples: Vec<Duration>,
    /// Operations per second over the cell.
    pub rate: f64,
    /// Turns that failed, and the first failure.
    pub errors: usize,
    pub first_error: Option<String>,
    /// Turns taken (cycles, or acquisitions in a hand-off cell).
    pub turns: usize,
    /// CPU time (user + system) this whole process used over the cell.
    pub cpu: Duration,
}

impl Cell {
    /// The `q`-quantile (nearest rank) of the samples.
    pub fn quantile(&mut self, q: f64) -> Option<Duration> {
        self.samples.sort_unstable();
        let n = self.samples.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
        self.samples.get(rank - 1).copied()
    }
}

/// Per turn: the time it took, or when the client started releasing.
type Shared = Arc<Mutex<Results>>;

#[derive(Default)]
struct Results {
    cell: Cell,
    /// The last holder of the hand-off key: when it started releasing, and who.
    last: Option<(Instant, usize)>,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Results> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Has every client take [`WARM_UP`] turns on a key of its own (`names[i]`
/// plus `-warm`), so that set-up is not measured. Returns the first failure.
pub async fn warm_up(peers: &mut [Box<dyn Peer>], names: &[String]) -> Result<(), String> {
    for (peer, name) in peers.iter_mut().zip(names) {
        let warm = format!("{name}-warm");
        for _ in 0..WARM_UP {
            peer.turn(&warm, &mut || {}).await?;
        }
    }
    Ok(())
}

/// Runs the clients for `length`: on `names[i]` each when `shared_key` is
/// `None` (cycles), otherwise all on that one key (hand-offs).
pub async fn run(
    peers: Vec<Box<dyn Peer>>,
    names: &[String],
    shared_key: Option<&str>,
    length: Length,
) -> Cell {
    let results: Shared = Arc::default();
    let ready = peers;
    let cpu_before = cpu_time();
    let started = Instant::now();
    // Counted turns have no end in time: a day stands for none.
    let (end, turns) = match length {
        Length::Time(d) => (started + d, u64::MAX),
        Length::Turns(n) => (started + Duration::from_secs(86_400), n),
    };
    let mut tasks = Vec::new();
    for (me, mut peer) in ready.into_iter().enumerate() {
        let name = shared_key.map_or_else(|| names[me].clone(), str::to_owned);
        let (results, handoff) = (results.clone(), shared_key.is_some());
        tasks.push(tokio::spawn(async move {
            let mut taken = 0;
            while Instant::now() < end && taken < turns {
                taken += 1;
                let began = Instant::now();
                let mut held = || {
                    let got = Instant::now();
                    let mut results = lock(&results);
                    if !handoff || got >= end {
                        return;
                    }
                    results.cell.turns += 1;
                    // Taking back one's own released lock is not a hand-off.
                    if let Some((at, _)) = results.last.take().filter(|(_, from)| *from != me) {
                        results.cell.samples.push(got - at);
                    }
                    // Taken just before the release call.
                    results.last = Some((Instant::now(), me));
                };
                let outcome = peer.turn(&name, &mut held).await;
                let mut results = lock(&results);
                match outcome {
                    Ok(()) if !handoff && Instant::now() < end => {
                        results.cell.turns += 1;
                        results.cell.samples.push(began.elapsed());
                    }
                    Ok(()) => {}
                    Err(e) => {
                        results.cell.errors += 1;
                        results.cell.first_error.get_or_insert(e);
                    }
                }
            }
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            let mut results = lock(&results);
            results.cell.errors += 1;
            results.cell.first_error.get_or_insert(e.to_string());
        }
    }
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    let cpu = cpu_time().saturating_sub(cpu_before);
    let mut results = lock(&results);
    let mut cell = std::mem::take(&mut results.cell);
    cell.rate = cell.samples.len() as f64 / elapsed;
    cell.cpu = cpu;
    cell
}

/// The CPU time (user + system) of this process so far, every thread summed;
/// zero when the kernel does not say.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let micros = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
    };
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |usage| {
        micros(usage.user_time()) + micros(usage.system_time())
    })
}
