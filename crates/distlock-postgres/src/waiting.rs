//! The wait of `version_cas` locks: one attempt, then
//! until a release of the name is notified or a jittered backoff ends (never
//! past the first blocker's expiry), and again, until the attempt wins or the
//! caller's wait ends.
//!
//! A serialization failure or a deadlock (two statements purging the same
//! expired rows in different orders, say) rolled the attempt back whole: it
//! counts as blocked and is retried within the caller's wait.

use crate::backend::Table;
use crate::error::DbError;
use async_trait::async_trait;
use distlock_core::LockError;
use distlock_core::adapter::{AcquireRequest, WaitUntil};
use distlock_core::toolkit::Backoff;
use std::time::Duration;

/// The first pause after a blocked attempt.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a release whose notification was lost is seen within
/// this (plus one round trip).
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Step<T> {
    /// Won; the wait is over.
    Won(T),
    /// Blocked by holders of which the first expires in about `remaining`
    /// (by the server clock; zero when unknown).
    Blocked { remaining: Duration },
}

/// The attempts of one acquire.
#[async_trait]
pub(crate) trait Attempts: Send {
    /// What a won attempt gives.
    type Won: Send;

    /// One attempt. Cancel-safe: dropped at any await, it leaves its undo to
    /// the implementor's `CancelGuard`.
    async fn attempt(&mut self) -> Result<Step<Self::Won>, DbError>;
}

/// Runs `attempts` until one wins, waking on `payload`'s notifications, and
/// gives `req.not_acquired()` when `req.wait` ends first.
pub(crate) async fn wait_for<A: Attempts>(
    table: &Table,
    req: &AcquireRequest<'_>,
    payload: &str,
    attempts: &mut A,
) -> Result<A::Won, LockError> {
    let no_wait = req.wait == WaitUntil::No;
    let waiter = table.wakeups.waiter(payload);
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    loop {
        // Armed before the attempt: a release between the attempt's reply and
        // the wait below still wakes it.
        let notified = waiter.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let outcome = tokio::select! {
            biased;
            outcome = attempts.attempt() => outcome,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        let outcome = match outcome {
            Err(e) if e.is_contended() => Step::Blocked {
                remaining: Duration::ZERO,
            },
            other => other.map_err(|e| table.error(e))?,
        };
        match outcome {
            Step::Won(won) => return Ok(won),
            Step::Blocked { remaining } => {
                if no_wait {
                    return Err(req.not_acquired());
                }
                // Never sleep past the first blocker's expiry: a crashed
                // holder is passed as soon as the server lets us.
                let bound = remaining + Duration::from_millis(1);
                tokio::select! {
                    () = &mut notified => backoff.reset(),
                    more = backoff.pause(bound, req.wait) => if !more {
                        return Err(req.not_acquired());
                    },
                }
            }
        }
    }
}
