//! Counters kept by every lock client, readable with [`crate::BackendLock::metrics`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters, updated by the lock and its leases.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub acquired: AtomicU64,
    pub reentered: AtomicU64,
    pub busy: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub renewals: AtomicU64,
    pub renewal_failures: AtomicU64,
    pub released: AtomicU64,
    pub lost: AtomicU64,
}

impl Metrics {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
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
