//! The driver: K clients (see [`super::workload`]) on a few keys while
//! faults are injected one after another and paused holders come and go, all
//! recorded on one clock; then the history is written and checked.

use super::history::{Event, History, Meta, Op, Outcome, Recorder};
use super::holder::{self, HolderCommand};
use super::inject::{HarnessInjector, Injector};
use super::workload::{Pace, Workload, client_loop};
use super::{FaultKind, Findings, check};
use crate::harness::Harness;
use distlock_core::{BoxError, LockKey, MemoryFence};
use rand::Rng;
use rand::seq::SliceRandom;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// What one chaos run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The trial name and what it requires; stored in the history.
    pub meta: Meta,
    /// Clients in this process.
    pub clients: usize,
    /// How many of them go through a fault proxy (taken from the total).
    pub faulty_clients: usize,
    /// Keys the clients share.
    pub keys: usize,
    /// The ttl of every lease.
    pub ttl: Duration,
    /// How long clients keep starting cycles.
    pub duration: Duration,
    /// How holders spend a hold.
    pub pace: Pace,
    /// The faults to choose from.
    pub faults: Vec<FaultKind>,
    /// The mean pause between two faults (each is drawn from half to one and
    /// a half of it).
    pub fault_gap: Duration,
    /// Where the history is written.
    pub history_file: PathBuf,
}

/// What a run produced.
#[derive(Debug)]
pub struct Report {
    /// The recorded history (also in [`Report::file`]).
    pub history: History,
    /// The checker's verdict.
    pub findings: Findings,
    /// The history file.
    pub file: PathBuf,
    /// Faults that could not be applied, holder processes that misbehaved,
    /// client tasks that panicked: any fails the run.
    pub errors: Vec<String>,
}

/// Runs `plan` against `harness` and checks the history. `holder` starts the
/// paused-holder process when the plan has [`FaultKind::HolderPause`].
pub async fn run(
    harness: &dyn Harness,
    plan: &Plan,
    holder: Option<HolderCommand>,
) -> Result<Report, BoxError> {
    if plan.keys == 0 || plan.clients == 0 || plan.faulty_clients > plan.clients {
        return Err(format!(
            "a chaos plan needs keys and clients, and no more faulty clients than clients: {plan:?}"
        )
        .into());
    }
    let tag = format!("{:08x}", rand::random::<u32>());
    let keys = (0..plan.keys)
        .map(|i| LockKey::new(format!("chaos-{tag}/k{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let workload = Arc::new(Workload {
        recorder: Recorder::new(),
        fence: MemoryFence::new(),
        pace: plan.pace,
        keys,
        ttl: plan.ttl,
    });
    let mut clients = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..plan.clients {
        let id = format!("c{i}");
        if i + plan.faulty_clients >= plan.clients {
            let faulty = harness.faulty_client().await?;
            proxies.push((id.clone(), faulty.faults));
            clients.push((id, faulty.lock));
        } else {
            clients.push((id, harness.client().await?));
        }
    }
    let injector = HarnessInjector::new(harness, proxies, &plan.faults);
    let until = Instant::now() + plan.duration;
    let mut tasks = JoinSet::new();
    for (id, lock) in clients {
        tasks.spawn(client_loop(workload.clone(), id, lock, until));
    }
    let holders = holder.filter(|_| plan.faults.contains(&FaultKind::HolderPause));
    let (fault_errors, holder_errors, joined) = tokio::join!(
        fault_loop(&injector, &workload, plan.fault_gap, until),
        holder_loop(&workload, holders, until),
        async {
            let mut failures = Vec::new();
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done {
                    failures.push(format!("a client task failed: {e}"));
                }
            }
            failures
        }
    );
    let healed = injector.heal().await;
    let mut errors: Vec<String> = fault_errors.into_iter().chain(holder_errors).collect();
    errors.extend(joined);
    if let Err(e) = healed {
        errors.push(format!("healing after the run: {e}"));
    }
    let history = workload.recorder.history(plan.meta.clone());
    history
        .write_file(&plan.history_file)
        .map_err(|e| format!("writing {}: {e}", plan.history_file.display()))?;
    let findings = check(&history);
    Ok(Report {
        history,
        findings,
        file: plan.history_file.clone(),
        errors,
    })
}

/// Injects one fault after another, in shuffled rounds over every kind the
/// injector offers, until `until`. Returns the faults that failed.
async fn fault_loop(
    injector: &dyn Injector,
    w: &Workload,
    mean_gap: Duration,
    until: Instant,
) -> Vec<String> {
    let kinds = injector.kinds();
    let mut errors = Vec::new();
    let mut round: Vec<FaultKind> = Vec::new();
    // Let every client get going before the first fault.
    tokio::time::sleep(gap(mean_gap)).await;
    while !kinds.is_empty() && Instant::now() + w.ttl < until {
        if round.is_empty() {
            round = kinds.clone();
            round.shuffle(&mut rand::rng());
        }
        let Some(kind) = round.pop() else { break };
        let length = w.ttl.mul_f64(rand::rng().random_range(0.5..2.0));
        let invoked = w.recorder.now();
        let holders = w.recorder.holders();
        let result = injector.inject(kind, length, &holders).await;
        let (client, outcome) = match result {
            Ok(target) => (target, Outcome::Ok),
            Err(e) => {
                errors.push(format!("{}: {e}", kind.name()));
                ("-".into(), Outcome::Error(e.to_string()))
            }
        };
        w.recorder.record(Event {
            client,
            lease: 0,
            key: String::new(),
            op: Op::Fault(kind),
            invoked,
            completed: w.recorder.now(),
            token: None,
            deadline: None,
            outcome,
        });
        tokio::time::sleep(gap(mean_gap)).await;
    }
    errors
}

/// Runs paused-holder cycles one after another until `until`.
async fn holder_loop(w: &Workload, command: Option<HolderCommand>, until: Instant) -> Vec<String> {
    let Some(command) = command else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    tokio::time::sleep(gap(w.ttl)).await;
    // A cycle is an acquire wait, a pause of up to 2 ttl and the wake-up.
    let mut n = 0;
    while Instant::now() + w.ttl * 3 < until {
        let key = w.keys[rand::rng().random_range(0..w.keys.len())].clone();
        if let Err(e) = holder::pause_cycle(w, &command, &format!("h{n}"), &key).await {
            errors.push(format!("holder-pause: {e}"));
        }
        n += 1;
        tokio::time::sleep(gap(w.ttl)).await;
    }
    errors
}

/// A random pause of about `mean`.
fn gap(mean: Duration) -> Duration {
    mean.mul_f64(rand::rng().random_range(0.5..1.5))
}
