//! What the adapters' own integration tests share beside the
//! [`state_rows`](crate::state_rows) scenarios: starting a server of the
//! test's own, waiting for a condition, the `lock_in` scenarios, and how
//! long the `leaks` tests churn.

use crate::servers::ServerError;
use distlock_core::{BoxError, FencingToken};
use std::future::Future;
use std::time::{Duration, Instant};

/// The server `start` launches, one start at a time in the test binary (each
/// is seconds of CPU and disk on a shared machine, and overlapping them only
/// makes every start slower). A failure panics naming `what` and the
/// launcher's error, which carries the install command: a missing binary
/// fails the test, never skips it.
#[allow(clippy::panic)]
pub async fn start_server<S>(what: &str, start: impl Future<Output = Result<S, ServerError>>) -> S {
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = STARTING.lock().await;
    match start.await {
        Ok(server) => server,
        Err(e) => panic!("cannot start {what} for the test: {e}"),
    }
}

/// The variable that sets how many acquire/release cycles each `leaks` test
/// runs (`just leaks` runs 10,000).
pub const LEAK_CYCLES_VAR: &str = "DISTLOCK_LEAK_CYCLES";

/// How many cycles a `leaks` test runs: `DISTLOCK_LEAK_CYCLES`, or 2,000.
/// What those tests check (nothing left on the server or in the process)
/// holds after any number of cycles; more cycles only meet more of the
/// rare interleavings, which is what the longer `just leaks` run is for.
#[allow(clippy::panic)]
pub fn leak_cycles() -> usize {
    match std::env::var(LEAK_CYCLES_VAR) {
        Err(_) => 2_000,
        Ok(text) => match text.trim().parse() {
            Ok(cycles) if cycles > 0 => cycles,
            _ => panic!("{LEAK_CYCLES_VAR}={text:?}: give a number of cycles above 0"),
        },
    }
}

/// Polls `condition` every 20 ms until it holds; panics after `limit`,
/// naming `what`.
#[allow(clippy::panic)]
pub async fn eventually<F: AsyncFnMut() -> bool>(limit: Duration, what: &str, mut condition: F) {
    let deadline = Instant::now() + limit;
    while !condition().await {
        if Instant::now() >= deadline {
            panic!("{what}: not true within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `lock_in`'s tokens rise across commit and rollback: `lock_in(commit)`
/// locks one name in a new transaction of the caller's, then commits it (or
/// rolls it back), and returns the token. Three in a row rise.
pub async fn tokens_rise_across_commit_and_rollback(
    mut lock_in: impl AsyncFnMut(bool) -> Result<FencingToken, BoxError>,
) -> Result<(), BoxError> {
    let rolled_back = lock_in(false).await?;
    let committed = lock_in(true).await?;
    let next = lock_in(true).await?;
    if committed <= rolled_back || next <= committed {
        return Err(format!("tokens {rolled_back}, {committed}, {next}: not rising").into());
    }
    Ok(())
}

/// `lock_in` excludes: `second`, started while the first holder's
/// transaction (which got `held`) is open, waits (`waits` sees the server
/// show its wait) until `end_first` ends that transaction, then gets a token
/// above `held`. A second that ends before it is seen waiting fails the
/// check at once, with what it ended with.
pub async fn second_waits_for_the_first(
    held: FencingToken,
    second: tokio::task::JoinHandle<FencingToken>,
    mut waits: impl AsyncFnMut() -> bool,
    end_first: impl Future<Output = Result<(), BoxError>>,
) -> Result<(), BoxError> {
    let waits_or_ended = async || second.is_finished() || waits().await;
    eventually(Duration::from_secs(10), "the second waits", waits_or_ended).await;
    if second.is_finished() {
        return match second.await {
            Ok(token) => {
                Err(format!("the second got the lock ({token}) while the first held it").into())
            }
            Err(e) => Err(format!("the second ended before it waited: {e}").into()),
        };
    }
    end_first.await?;
    let next = second.await?;
    if next <= held {
        return Err(format!("{next} after {held}").into());
    }
    Ok(())
}
