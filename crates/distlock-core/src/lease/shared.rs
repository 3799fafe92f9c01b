//! The state every `Lease` handle of one acquisition shares with its watchdog:
//! the status and its one-way transitions, the local deadline, and the release
//! on the backend (normal, and best-effort after loss). Apart from the handle so
//! that the handle's file reads as the API and this one as the state machine
//! behind it.

use super::clock_drift;
use crate::backend::{Holding, LossSignal, Ownership};
use crate::counters::Metrics;
use crate::metrics::Hold;
use crate::reentry::Reentry;
use crate::{FencingToken, LockError, LockKey, LossReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Releasing,
    Released,
    Lost(LossReason),
}

/// What every `Lease` handle of one acquisition shares with its watchdog.
pub(crate) struct Shared {
    pub key: LockKey,
    pub token: FencingToken,
    pub ttl: Duration,
    pub backend: &'static str,
    pub ops: Arc<dyn Holding>,
    pub metrics: Arc<Metrics>,
    pub reentry: Option<Reentry<Shared>>,
    /// The held-lease gauge and hold timer, ended as the status leaves `Held`.
    hold: Hold,
    pub(crate) status: watch::Sender<Status>,
    deadline: Mutex<Instant>,
    /// The end of the minimum hold, measured from before the grant was asked
    /// for: the server keeps the lock until then whatever this lease does.
    hold_until: Option<Instant>,
    /// Set when the acquisition is given back unused (a set that could not be
    /// taken whole): its release then deletes, minimum hold or not.
    pub(crate) hold_forgone: AtomicBool,
    /// The backend's loss signal until the watchdog takes it, or the hold
    /// ends first and drops it (an adapter may then reuse what it holds).
    loss: Mutex<Option<LossSignal>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these small maps or instants half-written.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub fn new(
        key: LockKey,
        token: FencingToken,
        ttl: Duration,
        sent_at: Instant,
        ops: Arc<dyn Holding>,
        metrics: Arc<Metrics>,
        reentry: Option<Reentry<Shared>>,
    ) -> Self {
        Shared {
            key,
            token,
            ttl,
            backend: ops.backend_name(),
            hold: metrics.hold_started(),
            ops,
            metrics,
            reentry,
            status: watch::Sender::new(Status::Held),
            deadline: Mutex::new(sent_at + ttl - clock_drift(ttl)),
            hold_until: None,
            hold_forgone: AtomicBool::new(false),
            loss: Mutex::new(None),
        }
    }

    /// Keeps the backend's loss signal for the watchdog.
    pub(super) fn set_loss(&self, loss: Option<LossSignal>) {
        *lock(&self.loss) = loss;
    }

    /// The backend's loss signal, unless the watchdog or the hold's end took
    /// it already.
    pub(super) fn take_loss(&self) -> Option<LossSignal> {
        lock(&self.loss).take()
    }

    /// Keeps the lock on the server until `min_hold` after `sent_at`, when
    /// the grant was asked for.
    pub fn with_min_hold(mut self, sent_at: Instant, min_hold: Option<Duration>) -> Self {
        self.hold_until = min_hold.and_then(|d| sent_at.checked_add(d));
        self
    }

    /// The ttl a renewal sent at `sent_at` asks for: the lease's own, or the
    /// time to the end of the minimum hold where that is longer, so a renewal
    /// never brings the server's expiry before it (a holder killed after it
    /// still blocks others until then).
    pub(crate) fn renew_ttl(&self, sent_at: Instant) -> Duration {
        self.ttl.max(self.hold_left(sent_at))
    }

    /// What is left of the minimum hold at `now`, in whole milliseconds
    /// rounded up (the unit every backend that keeps one takes).
    fn hold_left(&self, now: Instant) -> Duration {
        let left = self
            .hold_until
            .map_or(Duration::ZERO, |end| end.saturating_duration_since(now));
        let ms = left.as_nanos().div_ceil(1_000_000);
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Gives the lock back on the server: deleted, or before the minimum hold
    /// ends, its expiry set to the time left by an owner-checked renewal, so
    /// the server frees it then without this process.
    async fn give_back(&self) -> Result<Ownership, LockError> {
        let left = self.hold_left(Instant::now());
        if left.is_zero() || self.hold_forgone.load(Ordering::Acquire) {
            return self.ops.release().await;
        }
        tracing::debug!(backend = self.backend, key = %self.key, ?left, "released within its min_hold; the server keeps it until then");
        self.ops.renew(left).await
    }

    pub(crate) fn deadline(&self) -> Instant {
        *lock(&self.deadline)
    }

    /// Moves the deadline forward after a renewal sent at `sent_at` succeeded.
    pub(crate) fn extend(&self, sent_at: Instant) {
        let candidate = sent_at + self.ttl - clock_drift(self.ttl);
        let mut deadline = lock(&self.deadline);
        if candidate > *deadline {
            *deadline = candidate;
        }
    }

    pub(super) fn status(&self) -> Status {
        *self.status.borrow()
    }

    pub fn is_held(&self) -> bool {
        self.status() == Status::Held && Instant::now() < self.deadline()
    }

    /// Moves `from` → `to` atomically; returns the status found.
    pub(super) fn transition(&self, from: Status, to: Status) -> Status {
        let mut found = from;
        self.status.send_if_modified(|s| {
            found = *s;
            if *s == from {
                *s = to;
                true
            } else {
                false
            }
        });
        // Every way out of `Held` passes here exactly once: the hold ends now,
        // and a watchdog that has not started yet never will.
        if from == Status::Held && found == Status::Held {
            self.metrics.hold_ended(&self.hold);
            drop(self.take_loss());
        }
        found
    }

    /// Held → Lost. Returns false when the lease had already ended.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        let lost = self.transition(Status::Held, Status::Lost(reason)) == Status::Held;
        if lost {
            self.report_lost(reason);
        }
        lost
    }

    fn report_lost(&self, reason: LossReason) {
        self.metrics.lost(reason);
        tracing::warn!(backend = self.backend, key = %self.key, token = %self.token, %reason, "lease lost");
    }

    pub(super) fn lost_error(&self, reason: LossReason) -> LockError {
        LockError::Lost {
            key: self.key.clone(),
            reason,
        }
    }

    /// The error to report when the lease is no longer held, if it is not.
    pub(super) fn check_held(&self) -> Result<(), LockError> {
        match self.status() {
            Status::Held if Instant::now() < self.deadline() => Ok(()),
            Status::Held => {
                self.mark_lost(LossReason::Expired);
                Err(self.lost_error(LossReason::Expired))
            }
            Status::Lost(reason) => Err(self.lost_error(reason)),
            Status::Releasing | Status::Released => Err(self.lost_error(LossReason::Revoked)),
        }
    }

    /// One `Lease` value goes away. True if it was the last one of this
    /// acquisition, so the lock itself must be released.
    pub(super) fn leave(self: &Arc<Self>) -> bool {
        match &self.reentry {
            Some(reentry) => reentry.registry.leave(&self.key, &reentry.owner, self),
            None => true,
        }
    }

    /// Releasing → Released, waking nobody: nothing waits for it (the
    /// watchdog left when the lease stopped being `Held`, and `lost()` waits
    /// for `Lost` only), and waking the status channel's eight wait lists
    /// cost more than the rest of a release's bookkeeping.
    pub(super) fn mark_released(&self) {
        self.status.send_if_modified(|status| {
            *status = Status::Released;
            false
        });
    }

    /// Releases on the backend after the status went Held → Releasing.
    pub(super) async fn finish_release(&self) -> Result<(), LockError> {
        match self.give_back().await {
            Ok(Ownership::Held) => {
                self.mark_released();
                self.metrics.released();
                Ok(())
            }
            Ok(Ownership::NotHeld) => {
                // The lock was gone while this lease still believed it held it.
                let reason = LossReason::Revoked;
                self.status.send_replace(Status::Lost(reason));
                self.report_lost(reason);
                Err(self.lost_error(reason))
            }
            Err(error) => {
                // The ttl frees the lock if the release never arrived.
                self.mark_released();
                tracing::warn!(backend = self.backend, key = %self.key, token = %self.token, %error, "release failed; the ttl frees the lock");
                Err(error)
            }
        }
    }

    /// Best-effort release after loss, so a lock we may still hold on the server
    /// (partition, max hold) is freed as soon as the server hears from us.
    ///
    /// Retried until the server answers, for up to two ttls: the first attempt
    /// is often lost in the very partition that caused the loss, and a backend
    /// that keeps a key alive through a shared session (etcd's client lease)
    /// would otherwise keep an orphan key alive once the partition heals before
    /// the server expired that session.
    pub(crate) async fn release_after_loss(&self) {
        let give_up = Instant::now() + self.ttl * 2;
        let pause = (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::debug!(backend = self.backend, key = %self.key, "release after loss got no answer; the ttl frees the lock");
                return;
            }
            match tokio::time::timeout(self.ttl.min(left), self.give_back()).await {
                Ok(Ok(_)) => return,
                Ok(Err(error)) if !error.is_transient() => {
                    tracing::debug!(backend = self.backend, key = %self.key, %error, "release after loss refused");
                    return;
                }
                Ok(Err(_)) | Err(_) => tokio::time::sleep(pause).await,
            }
        }
    }
}
