//! The chaos trials: one per backend (`<backend>::chaos`), each on servers of
//! its own, plus `redis::restart_window` (item 3 of the chaos issue), the
//! clustered `etcd_cluster::chaos` and `zk_ensemble::chaos` (`cluster.rs`) and
//! the `<backend>::clock_step_back` trials (`clock.rs`). The
//! workload, the faults and the checker are the testkit's
//! (`distlock_testkit::chaos`); this module says, per backend, which harness,
//! which faults, and which properties are required rather than measured.

pub mod clock;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub mod cluster;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub mod replica;
#[cfg(feature = "redis")]
pub mod restart;
pub mod trials;

use distlock_core::{BoxError, Capabilities, FencingGuarantee};
use distlock_testkit::Harness;
use distlock_testkit::chaos::report::Row;
use distlock_testkit::chaos::run::{Plan, Report};
use distlock_testkit::chaos::{FaultKind, Meta, Pace, Requirement, holder::HolderCommand, run};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Starts a harness on servers of its own (the run kills them).
pub type Start = fn() -> StartFuture;
/// What a [`Start`] returns.
pub type StartFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn Harness>, BoxError>> + Send>>;

/// One chaos trial.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `<backend>::chaos` and the like.
    pub trial: &'static str,
    /// The backend's name in `DISTLOCK_TEST_SKIP`.
    pub backend: &'static str,
    /// Its harness.
    pub start: Start,
    /// The faults to inject.
    pub faults: &'static [FaultKind],
    /// Whether overlaps fail the trial or are measured.
    pub exclusion: Requirement,
}

/// Every fault: the backends with a server process and a proxy take them all.
pub const ALL: &[FaultKind] = &FaultKind::ALL;
/// The in-memory backend has no server process and no other process can reach it:
/// its network cut is the simulated proxy's.
pub const MEMORY: &[FaultKind] = &[
    FaultKind::ProxyDelay,
    FaultKind::ProxyBlackhole,
    FaultKind::ProxyReset,
    FaultKind::ProxyClose,
    FaultKind::NetworkCut,
];

/// A 3-member cluster's faults: a member paused or killed, the leader, a
/// follower or the holder's member cut off its peers, and a paused holder.
pub const CLUSTER: &[FaultKind] = &[
    FaultKind::ServerPause,
    FaultKind::ServerKill,
    FaultKind::PartitionLeader,
    FaultKind::PartitionMinority,
    FaultKind::PartitionHolder,
    FaultKind::HolderPause,
];

/// Clients per trial, of which some go through a fault proxy.
pub const CLIENTS: usize = 6;
/// Faulty clients among them.
pub const FAULTY: usize = 2;
/// Keys they share: few, so that every key is contended.
pub const KEYS: usize = 3;
/// How late `lost()` may be seen after the deadline: the recording task's
/// scheduling on a loaded 2-core machine, not the lock's.
pub const LOST_SLACK: Duration = Duration::from_millis(250);

/// The trials this build has: each backend's, from [`crate::backends`].
pub fn specs() -> Vec<Spec> {
    crate::backends()
        .into_iter()
        .flat_map(|backend| (backend.chaos)())
        .collect()
}

/// The clustered trials, `etcd_cluster::chaos` and `zk_ensemble::chaos`,
/// which the `topologies` target runs in containers too.
pub fn cluster_specs() -> Vec<Spec> {
    specs()
        .into_iter()
        .filter(|spec| spec.faults == CLUSTER)
        .collect()
}

/// How long each trial's clients run: `DISTLOCK_CHAOS_SECS`, 10 s by default
/// (the short version every `cargo test` runs).
pub fn duration() -> Result<Duration, String> {
    match std::env::var("DISTLOCK_CHAOS_SECS") {
        Err(_) => Ok(Duration::from_secs(10)),
        Ok(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|secs| *secs > 0.0 && secs.is_finite())
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                format!("DISTLOCK_CHAOS_SECS={text:?} is not a positive number of seconds")
            }),
    }
}

/// Where histories go: `DISTLOCK_CHAOS_DIR`, else `chaos` under `target_tmp`
/// (the test binary's `CARGO_TARGET_TMPDIR`, `target/tmp`).
pub fn history_dir(target_tmp: &str) -> PathBuf {
    std::env::var_os("DISTLOCK_CHAOS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(target_tmp).join("chaos"))
}

/// The history file of `trial` in `dir`.
pub fn history_file(dir: &Path, trial: &str) -> PathBuf {
    dir.join(format!(
        "{}.history",
        trial.replace("::", "-").replace('/', "-")
    ))
}

/// The ttl of a trial: 1 s, or the backend's minimum if higher, in whole
/// multiples of its granularity.
pub fn ttl(capabilities: &Capabilities) -> Duration {
    let wanted = capabilities.min_ttl.max(Duration::from_secs(1));
    let step = capabilities.ttl_granularity.max(Duration::from_nanos(1));
    let steps = wanted.as_nanos().div_ceil(step.as_nanos());
    step * u32::try_from(steps).unwrap_or(u32::MAX)
}

/// Token order is required wherever the backend promises strict fencing.
pub fn token_order(capabilities: &Capabilities) -> Requirement {
    match capabilities.fencing {
        FencingGuarantee::Strict => Requirement::Required,
        FencingGuarantee::UnderTimingAssumptions => Requirement::Measured,
    }
}

/// The command that starts the paused holder against `harness`'s locks.
pub fn holder_command(harness: &dyn Harness, binary: &'static str) -> Option<HolderCommand> {
    let url = harness.lock_url()?;
    Some(Arc::new(move |key, ttl, go| {
        let mut command = Command::new(binary);
        command
            .arg(&url)
            .arg(key.as_str())
            .arg(ttl.as_millis().to_string())
            .arg(go);
        command
    }))
}

/// Runs `spec` for `duration`. Returns its row (a failed trial's too, and
/// one saying it did not run if it could not, so that the table shows every
/// trial), and the account of what failed, if anything did.
pub async fn run_spec(
    spec: &Spec,
    holder: &'static str,
    duration: Duration,
    dir: &Path,
) -> (Row, Result<(), String>) {
    let (report, harness) = match run_report(spec, holder, duration, dir).await {
        Ok(done) => done,
        Err(why) => return (Row::not_run(spec.trial, spec.exclusion), Err(why)),
    };
    // One print per trial, so parallel trials do not interleave their lines.
    println!("{}", report.text());
    let verdict = if report.passed() {
        Ok(())
    } else {
        Err(format!(
            "{}\n--- server logs ---\n{}",
            report.text(),
            harness.server_logs()
        ))
    };
    (report.row(), verdict)
}

/// Starts `spec`'s harness and runs its plan.
async fn run_report(
    spec: &Spec,
    holder: &'static str,
    duration: Duration,
    dir: &Path,
) -> Result<(Report, Arc<dyn Harness>), String> {
    let harness = (spec.start)()
        .await
        .map_err(|e| format!("starting {}: {e}", spec.trial))?;
    let capabilities = harness.capabilities();
    let ttl = ttl(&capabilities);
    // A clock stepped back needs names that sit idle and are collected
    // between steps, and clients that all share one `state_ttl`.
    let (keys, faulty, fault_gap) = if spec.faults == clock::STEP_BACK {
        (clock::NAMES, 0, ttl * clock::STEP_GAP)
    } else if spec.faults == [FaultKind::Failover] {
        // Every client through the one address the failover moves.
        (KEYS, 0, ttl)
    } else {
        (KEYS, FAULTY, ttl)
    };
    let plan = Plan {
        meta: Meta {
            trial: spec.trial.into(),
            exclusion: spec.exclusion,
            token_order: token_order(&capabilities),
            lost_slack: LOST_SLACK,
        },
        clients: CLIENTS,
        faulty_clients: faulty,
        keys,
        ttl,
        duration,
        pace: Pace::Mixed,
        faults: spec.faults.to_vec(),
        fault_gap,
        history_file: history_file(dir, spec.trial),
    };
    let report = run(&*harness, &plan, holder_command(&*harness, holder))
        .await
        .map_err(|e| format!("{}: {e}", spec.trial))?;
    Ok((report, harness))
}
