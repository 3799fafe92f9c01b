//! Counters kept by every lock client, readable with [`crate::adapter::BackendLock::metrics`].
//! Each event also goes to the `metrics` facade when that feature is on
//! (`metrics.rs`), so both views count the same things.

use crate::LossReason;
use crate::metrics::{Hold, Keys, Waiting};
use crate::outcome::Outcome;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Live counters, updated by the lock and its leases.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub backend: &'static str,
    /// The `metrics` facade's side; zero-sized without the feature.
    keys: Keys,
    acquired: AtomicU64,
    reentered: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl Metrics {
    pub fn new(backend: &'static str) -> Self {
        Metrics {
            backend,
            keys: Keys::new(backend),
            acquired: AtomicU64::new(0),
            reentered: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            renewal_failures: AtomicU64::new(0),
            released: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// An acquire goes to the backend; end it with `acquire_ended`.
    pub fn acquire_started(&self, started: Instant) -> Waiting {
        self.keys.acquire_started(started)
    }

    /// An acquire that went to the backend ended; called once per acquire.
    pub fn acquire_ended(&self, outcome: Outcome, waiting: &Waiting) {
        match outcome {
            Outcome::Acquired => bump(&self.acquired),
            Outcome::Busy => bump(&self.busy),
            Outcome::Timeout => bump(&self.timeouts),
            Outcome::Error => bump(&self.errors),
            // Not an outcome of the snapshot: the caller saw no result.
            Outcome::Cancelled => {}
        }
        self.keys.acquire_ended(outcome, waiting);
    }

    /// A reentrant acquire served locally: no wait to measure.
    pub fn reentered(&self) {
        bump(&self.reentered);
        self.keys.reentered();
    }

    pub fn renewed(&self) {
        bump(&self.renewals);
        self.keys.renewed();
    }

    pub fn renewal_failed(&self) {
        bump(&self.renewal_failures);
        self.keys.renewal_failed();
    }

    pub fn released(&self) {
        bump(&self.released);
        self.keys.released();
    }

    pub fn lost(&self, reason: LossReason) {
        bump(&self.lost);
        self.keys.lost(reason);
    }

    /// A lease starts being held; end it with `hold_ended`.
    pub fn hold_started(&self) -> Hold {
        self.keys.hold_started()
    }

    /// A lease stopped being held; called once per lease.
    pub fn hold_ended(&self, hold: &Hold) {
        self.keys.hold_ended(hold);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            acquired: self.acquired.load(Relaxed),
            reentered: self.reentered.load(Relaxed),
            busy: self.busy.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            errors: self.errors.load(Relaxed),
            renewals: self.renewals.load(Relaxed),
            renewal_failures: self.renewal_failures.load(Relaxed),
            released: self.released.load(Relaxed),
            lost: self.lost.load(Relaxed),
        }
    }
}

/// A copy of one lock client's counters since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Acquisitions that reached the backend and won.
    pub acquired: u64,
    /// Reentrant acquisitions served locally for the same owner.
    pub reentered: u64,
    /// `Wait::No` attempts that found the lock held.
    pub busy: u64,
    /// Waits that ended unacquired, and acquires whose reply came too late.
    pub timeouts: u64,
    /// Acquires that failed with a backend or validation error.
    pub errors: u64,
    /// Successful renewals.
    pub renewals: u64,
    /// Renewal attempts that failed (each is retried until the local deadline).
    pub renewal_failures: u64,
    /// Leases released by their owner (explicitly or on drop).
    pub released: u64,
    /// Leases lost (expired, revoked, session ended, max hold).
    pub lost: u64,
}
