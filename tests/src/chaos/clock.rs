//! `<backend>::clock_step_back`: on every backend that seeds tokens from the
//! server clock (Redis, Redlock, MySQL and PostgreSQL `version_cas`), clients
//! with `state_ttl=2s` lock many names, so that names sit idle, are
//! collected, and are locked again, while the server's wall clock is stepped
//! back an hour at a time and left there. A collected name's counter is
//! reseeded above the namespace's high-water, whatever the clock says: tokens
//! must still rise and the fence must admit no stale write.

#[cfg(any(
    feature = "redis",
    feature = "redlock",
    feature = "mysql",
    feature = "postgres"
))]
use super::Spec;
use distlock_testkit::chaos::FaultKind;
#[cfg(any(
    feature = "redis",
    feature = "redlock",
    feature = "mysql",
    feature = "postgres"
))]
use distlock_testkit::chaos::Requirement;
#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres"))]
use distlock_testkit::servers::MovableClock;
#[cfg(any(
    feature = "redis",
    feature = "redlock",
    feature = "mysql",
    feature = "postgres"
))]
use std::sync::Arc;
use std::time::Duration;

/// The one fault of these trials, so that it explains whatever the history shows.
pub const STEP_BACK: &[FaultKind] = &[FaultKind::ClockStepBack];
/// Names the clients share: enough that a name often sits idle for longer
/// than ttl + `state_ttl` and is collected, few enough that it is then
/// locked again within the run.
pub const NAMES: usize = 40;
/// Every client's `state_ttl`: the least every scheme accepts.
pub const STATE_TTL: Duration = Duration::from_secs(2);
/// The pause between two steps, in ttls: long enough for names locked since
/// the last step to be collected before the next one.
pub const STEP_GAP: u32 = 4;

/// Starts a server under a new movable clock, on a blocking thread (the
/// launchers' futures are not `Send`, harness futures must be).
#[cfg(any(feature = "mysql", feature = "postgres"))]
async fn under_clock<S, F>(start: fn(MovableClock) -> F) -> Result<S, distlock_core::BoxError>
where
    S: Send + 'static,
    F: std::future::Future<Output = Result<S, distlock_testkit::servers::ServerError>> + 'static,
{
    let clock = MovableClock::new()?;
    let runtime = tokio::runtime::Handle::current();
    Ok(tokio::task::spawn_blocking(move || runtime.block_on(start(clock))).await??)
}

/// `redis::clock_step_back`: one node, no persistence and no fault that
/// loses data, so the high-water is kept and token order is required.
#[cfg(feature = "redis")]
pub fn redis() -> Spec {
    use crate::redis::RedisHarness;
    use distlock_testkit::servers::RedisOptions;
    Spec {
        trial: "redis::clock_step_back",
        backend: "redis",
        start: || {
            Box::pin(async {
                let options = RedisOptions {
                    clock: Some(MovableClock::new()?),
                    ..RedisOptions::default()
                };
                let params = format!("ttl=1s&state_ttl={}s", STATE_TTL.as_secs());
                Ok(Arc::new(RedisHarness::launch_with(options, &params).await?) as _)
            })
        },
        faults: STEP_BACK,
        exclusion: Requirement::Required,
    }
}

/// `redlock::clock_step_back`: the three nodes' clocks stepped back together.
/// Redlock promises fencing under timing assumptions, so token order is
/// measured, like its overlaps; the fence is required.
#[cfg(feature = "redlock")]
pub fn redlock() -> Spec {
    use crate::redlock::RedlockHarness;
    Spec {
        trial: "redlock::clock_step_back",
        backend: "redlock",
        start: || {
            Box::pin(async {
                let harness = RedlockHarness::launch_with_clocks(3).await?;
                Ok(Arc::new(harness.with_state_ttl(STATE_TTL)) as _)
            })
        },
        faults: STEP_BACK,
        exclusion: Requirement::Measured,
    }
}

/// `mysql::clock_step_back`: `version_cas` on a MariaDB under the clock.
#[cfg(feature = "mysql")]
pub fn mysql() -> Spec {
    use crate::mysql::MySql;
    use crate::sql::SqlHarness;
    use distlock_testkit::servers::MariaDbServer;
    Spec {
        trial: "mysql::clock_step_back",
        backend: "mysql",
        start: || {
            Box::pin(async {
                let server =
                    under_clock(
                        |clock| async move { MariaDbServer::start_with_clock(&clock).await },
                    )
                    .await?;
                let strategy = distlock_mysql::Strategy::VersionCas;
                Ok(
                    Arc::new(SqlHarness::<MySql>::on_server(strategy, server, STATE_TTL).await?)
                        as _,
                )
            })
        },
        faults: STEP_BACK,
        exclusion: Requirement::Required,
    }
}

/// `postgres::clock_step_back`: `version_cas` on a PostgreSQL under the clock.
#[cfg(feature = "postgres")]
pub fn postgres() -> Spec {
    use crate::postgres::Postgres;
    use crate::sql::SqlHarness;
    use distlock_testkit::servers::PostgresServer;
    Spec {
        trial: "postgres::clock_step_back",
        backend: "postgres",
        start: || {
            Box::pin(async {
                let server =
                    under_clock(
                        |clock| async move { PostgresServer::start_with_clock(&clock).await },
                    )
                    .await?;
                let strategy = distlock_postgres::Strategy::VersionCas;
                Ok(
                    Arc::new(SqlHarness::<Postgres>::on_server(strategy, server, STATE_TTL).await?)
                        as _,
                )
            })
        },
        faults: STEP_BACK,
        exclusion: Requirement::Required,
    }
}
