//! Redis's chaos trials, and the restart window of item 3: Redis without
//! persistence forgets every lock when it is killed, so without
//! `restart_guard` a second client can get a lock whose holder still believes
//! in it; with a guard of at least the longest ttl it cannot.

use super::{ALL, Spec, history_file, ttl};
use distlock_core::BoxError;
use distlock_testkit::Harness;
use distlock_testkit::chaos::run::{Plan, Report};
use distlock_testkit::chaos::{FaultKind, Meta, Pace, Requirement, run};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::redis::RedisHarness;
use crate::redis_sentinel::SentinelHarness;
use distlock_testkit::servers::RedisOptions;

/// Every client's URL parameters with the guard: the guard equals the ttl
/// (the longest in use), as `docs/backends/redis.md` asks.
pub const GUARDED: &str = "restart_guard=1s&ttl=1s";
/// Without it.
pub const BARE: &str = "ttl=1s";

/// `redis::chaos` (no persistence, guarded) and `redis::chaos_aof` (every
/// write persisted, no guard needed): both must show no overlap. And
/// `redis_cluster::chaos`, three primaries with a replica each, where a
/// killed or paused primary is failed over, and the two Sentinel trials:
/// replication is asynchronous, so overlaps and token order are measured
/// (`RedisBackend::failing_over`), and no stale write may be admitted.
pub fn redis_specs() -> Vec<Spec> {
    vec![
        Spec {
            trial: "redis::chaos",
            backend: "redis",
            start: || {
                Box::pin(async {
                    Ok(
                        Arc::new(RedisHarness::launch_with(RedisOptions::default(), GUARDED).await?)
                            as _,
                    )
                })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "redis::chaos_aof",
            backend: "redis",
            start: || {
                Box::pin(async {
                    let aof = RedisOptions {
                        aof: true,
                        ..RedisOptions::default()
                    };
                    Ok(Arc::new(RedisHarness::launch_with(aof, BARE).await?) as _)
                })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "redis_cluster::chaos",
            backend: "redis",
            start: || {
                Box::pin(async {
                    Ok(
                        Arc::new(crate::redis_cluster::ClusterHarness::launch_replicated().await?)
                            as _,
                    )
                })
            },
            faults: ALL,
            // A failover loses what the replica had not received: the lock key too.
            exclusion: Requirement::Measured,
        },
        sentinel("redis_sentinel::chaos", || {
            Box::pin(async { Ok(Arc::new(SentinelHarness::launch_chaos(GUARDED).await?) as _) })
        }),
        sentinel("redis_sentinel::chaos_wait_replicas", || {
            Box::pin(async {
                Ok(Arc::new(SentinelHarness::launch_chaos("wait_replicas=1&ttl=1s").await?) as _)
            })
        }),
        super::clock::redis(),
    ]
}

/// A trial on a primary and a replica behind three Sentinels that fail over
/// after 500 ms. Without persistence, a killed primary may come back empty
/// before the Sentinels act, and a failover may lose the last writes:
/// overlaps and token order are measured.
fn sentinel(trial: &'static str, start: super::Start) -> Spec {
    Spec {
        trial,
        backend: "redis",
        start,
        faults: ALL,
        exclusion: Requirement::Measured,
    }
}

/// The two runs of `redis::restart_window`, side by side on two servers
/// without persistence, killed and restarted under load: without a guard the
/// overlap is measured; with one it must be zero. Returns both reports.
pub async fn restart_window(duration: Duration, dir: &Path) -> Result<(Report, Report), BoxError> {
    let (bare, guarded) = tokio::join!(
        window_run(
            "redis::restart_window/no_guard",
            BARE,
            Requirement::Measured,
            duration,
            dir
        ),
        window_run(
            "redis::restart_window/guard",
            GUARDED,
            Requirement::Required,
            duration,
            dir
        ),
    );
    Ok((bare?, guarded?))
}

async fn window_run(
    trial: &str,
    params: &str,
    exclusion: Requirement,
    duration: Duration,
    dir: &Path,
) -> Result<Report, BoxError> {
    let harness = RedisHarness::launch_with(RedisOptions::default(), params).await?;
    let ttl = ttl(&harness.capabilities());
    let plan = Plan {
        meta: Meta {
            trial: trial.into(),
            exclusion,
            token_order: Requirement::Required,
            lost_slack: super::LOST_SLACK,
        },
        clients: super::CLIENTS,
        // Only the kill: nothing else should explain what the history shows.
        faulty_clients: 0,
        keys: super::KEYS,
        ttl,
        duration,
        // Holders that write all the time: a holder still writing after the
        // restart is what the window is made of.
        pace: Pace::Busy,
        faults: vec![FaultKind::ServerKill],
        // Each restart makes a guarded namespace wait one guard (plus the
        // second the server's uptime is rounded to): room to work between.
        fault_gap: ttl * 3,
        history_file: history_file(dir, trial),
    };
    run(&harness, &plan, None).await
}
