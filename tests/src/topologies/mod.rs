//! The `topologies` target: clustered servers in containers, one network each run.
//!
//! Every case starts its own servers through the testkit's launchers with the
//! docker launcher as the default (`DISTLOCK_LAUNCHER=native` is refused: a native
//! server has no network of its own to cut), and removes them when it ends.
//! `etcd_cluster::chaos` and `zk_ensemble::chaos` are the `chaos` target's
//! clustered trials (`crate::chaos::cluster`), run here in containers. A
//! backend's own topologies come from its `TestBackend::topologies`, so a new
//! one adds no line here.

use distlock_core::BoxError;
use distlock_testkit::servers::{LauncherKind, launcher, set_default_launcher};
use libtest_mimic::{Failed, Trial};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

#[cfg(feature = "etcd")]
mod etcd_cluster;
#[cfg(feature = "mysql")]
mod mariadb;
#[cfg(feature = "redis")]
mod redis_sentinel;
#[cfg(feature = "zookeeper")]
mod zk_ensemble;

/// A case's body.
pub type Body = fn() -> Pin<Box<dyn Future<Output = Result<(), BoxError>>>>;

/// One case: its name and its body.
pub type Case = (&'static str, Body);

/// A topology: its name and its cases.
pub type Topology = (&'static str, Vec<Case>);

/// Longest any one case may run.
const CASE_LIMIT: Duration = Duration::from_secs(240);

/// Every case of the enabled backends, named `<topology>::<case>`, and the
/// clustered chaos trials with the paused holder `holder` and their histories
/// in `dir`.
pub fn trials(holder: &'static str, dir: PathBuf) -> Vec<Trial> {
    set_default_launcher(LauncherKind::Docker);
    // A backend's own topologies, from its entry in `crate::backends()`.
    #[allow(unused_mut)]
    let mut cases: Vec<Topology> = (crate::backends().iter())
        .flat_map(|backend| (backend.topologies)())
        .collect();
    #[cfg(feature = "etcd")]
    cases.push(("etcd_cluster", etcd_cluster::cases()));
    #[cfg(feature = "zookeeper")]
    cases.push(("zk_ensemble", zk_ensemble::cases()));
    #[cfg(feature = "mysql")]
    cases.push(("mariadb", mariadb::cases()));
    #[cfg(feature = "redis")]
    cases.push(("redis_sentinel", redis_sentinel::cases()));
    cases
        .into_iter()
        .flat_map(|(topology, cases)| {
            cases.into_iter().map(move |(name, body)| {
                Trial::test(format!("{topology}::{name}"), move || run(body))
            })
        })
        .chain(chaos_trials(holder, dir))
        .collect()
}

/// `etcd_cluster::chaos` and `zk_ensemble::chaos`, for `DISTLOCK_CHAOS_SECS`.
fn chaos_trials(holder: &'static str, dir: PathBuf) -> Vec<Trial> {
    crate::chaos::cluster_specs()
        .into_iter()
        .map(|spec| {
            let dir = dir.clone();
            Trial::test(spec.trial, move || {
                run(async move || {
                    let duration = crate::chaos::duration()?;
                    let (_, verdict) = crate::chaos::run_spec(&spec, holder, duration, &dir).await;
                    Ok(verdict?)
                })
            })
        })
        .collect()
}

fn run(body: impl AsyncFnOnce() -> Result<(), BoxError>) -> Result<(), Failed> {
    match launcher() {
        Ok(LauncherKind::Docker) => {}
        Ok(LauncherKind::Native) => {
            return Err("the topologies need containers (network cuts): unset DISTLOCK_LAUNCHER or set it to `docker`".into());
        }
        Err(error) => return Err(error.to_string().into()),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("tokio runtime: {error}"))?;
    runtime.block_on(async {
        match tokio::time::timeout(CASE_LIMIT, body()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.to_string().into()),
            Err(_) => Err(format!("the case did not finish within {CASE_LIMIT:?}").into()),
        }
    })
}

/// A fresh lock key named `name-<random>`, so that reruns never meet old state.
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "nats"))]
pub(crate) fn key(name: &str) -> Result<distlock_core::LockKey, BoxError> {
    Ok(distlock_core::LockKey::new(format!(
        "{name}-{:08x}",
        rand::random::<u32>()
    ))?)
}

/// Fails with every violation if `history` has two holders at once or a token
/// that did not rise; otherwise returns how many sections it holds.
#[cfg(any(
    feature = "etcd",
    feature = "mysql",
    feature = "zookeeper",
    feature = "nats"
))]
pub(crate) fn check_history(
    history: &distlock_testkit::history::History,
) -> Result<usize, BoxError> {
    let violations = history.check();
    if violations.is_empty() {
        Ok(history.len())
    } else {
        Err(format!("the history is unsafe: {violations:?}").into())
    }
}

/// Holds `lease` for `work` as client `client` and records the section, which
/// ends early, at once, if `lost()` fires. Returns whether the lease was lost.
#[cfg(any(feature = "etcd", feature = "redis", feature = "zookeeper"))]
pub(crate) async fn hold(
    history: &distlock_testkit::history::History,
    client: usize,
    lease: &distlock_core::Lease,
    work: Duration,
) -> bool {
    let entered = std::time::Instant::now();
    let lost = tokio::select! {
        () = tokio::time::sleep(work) => !lease.is_held(),
        _ = lease.lost() => true,
    };
    history.record_lease(client, lease, entered);
    lost
}

/// Polls `condition` every 50 ms until it holds or `limit` passes.
#[cfg(any(feature = "etcd", feature = "redis", feature = "zookeeper"))]
pub(crate) async fn until<F, Fut>(
    limit: Duration,
    what: &str,
    mut condition: F,
) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + limit;
    while !condition().await {
        if std::time::Instant::now() >= deadline {
            return Err(format!("{what}: not within {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Spawns `waiter` acquiring `key` with `options` and returns the lease with
/// the instant it was granted. An acquire that fails is sent again, after
/// 100 ms, until `retry_for` has passed since the start (`Duration::ZERO`:
/// one attempt, whose error is returned).
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "nats"))]
pub(crate) fn spawn_waiter<L: distlock_core::DistributedLock + 'static>(
    waiter: L,
    key: distlock_core::LockKey,
    options: distlock_core::AcquireOptions,
    retry_for: Duration,
) -> tokio::task::JoinHandle<
    Result<(distlock_core::Lease, std::time::Instant), distlock_core::LockError>,
> {
    tokio::spawn(async move {
        let deadline = std::time::Instant::now() + retry_for;
        loop {
            match waiter.acquire(&key, &options).await {
                Ok(lease) => return Ok((lease, std::time::Instant::now())),
                Err(error) if std::time::Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
}
