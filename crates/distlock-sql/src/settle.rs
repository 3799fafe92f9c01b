//! Retrying statements that lost to another transaction (a deadlock victim, a
//! lock wait timeout, a serialization failure): the server rolled them back
//! whole, so nothing of them took effect and trying again is safe. Not a
//! stable API.

use crate::db_error::DbError;
use distlock_core::adapter::{AcquireRequest, WaitUntil};
use distlock_core::toolkit::Backoff;
use std::time::{Duration, Instant};

/// The first pause after a statement lost to another transaction.
pub const CONTENDED_FIRST: Duration = Duration::from_millis(4);
/// The longest such pause.
pub const CONTENDED_CAP: Duration = Duration::from_millis(250);
/// `Wait::No`: how long after the request started a statement that lost to
/// another transaction is still retried. A deadlock is usually over at once, so
/// one or two retries fit; past it the answer is `Busy`. A row held by a
/// transaction for longer answers a lock wait timeout only after the 1 s lock
/// wait, so then the answer is `Busy` after that second.
pub const NO_WAIT_RETRY: Duration = Duration::from_millis(250);

/// Until when an acquisition retries statements refused by row-lock contention:
/// the caller's wait, or for `Wait::No` [`NO_WAIT_RETRY`] after it started.
pub fn retry_until(req: &AcquireRequest<'_>) -> WaitUntil {
    match req.wait {
        WaitUntil::No => WaitUntil::Deadline(req.started + NO_WAIT_RETRY),
        wait => wait,
    }
}

/// Retries of a statement that the server refused for row-lock contention
/// (it was rolled back whole, so nothing took effect), with jittered pauses,
/// until `until`:
///
/// ```text
/// let mut retry = Settle::new(until);
/// let done = loop {
///     match conn.execute(statement()).await {
///         Ok(done) => break done,
///         Err(e) => retry.again(e).await?,
///     }
/// };
/// ```
#[derive(Debug)]
pub struct Settle {
    started: Instant,
    backoff: Backoff,
    until: WaitUntil,
}

impl Settle {
    /// Retries until `until`.
    pub fn new(until: WaitUntil) -> Self {
        Settle {
            started: Instant::now(),
            backoff: Backoff::new(CONTENDED_FIRST, CONTENDED_CAP),
            until,
        }
    }

    /// After the failure `e`: `Ok` once paused when trying again may succeed;
    /// `e` itself when it is not contention; [`DbError::Contended`] when
    /// `until` came.
    pub async fn again(&mut self, e: DbError) -> Result<(), DbError> {
        if !e.is_contended() {
            return Err(e);
        }
        tracing::debug!(error = %e, "refused for row-lock contention; retrying");
        match self.backoff.pause(CONTENDED_CAP, self.until).await {
            true => Ok(()),
            false => Err(DbError::Contended(self.started.elapsed())),
        }
    }
}
