//! The lease lifecycle, written once for every adapter: the local deadline, the
//! lost signal, release and release on drop (the renewal watchdog is in
//! `renewal.rs`). Reentrant
//! handles share one lease; their bookkeeping is in `reentry.rs`.
//!
//! Invariant: a lease believes it holds the lock only before
//! `sent_at + ttl - drift`, where `sent_at` was taken before the acquire or renew
//! request went out. Any server measures its expiry from a later instant, so the
//! client stops believing first (given sane clock rates).

use crate::backend::{Backend, Holding, LossSignal, Ownership};
use crate::metrics::Metrics;
use crate::reentry::Reentry;
use crate::telemetry::Hold;
use crate::toolkit::{CancelGuard, UndoFuture};
use crate::{FencingToken, LockError, LockKey, LossReason, Owner};
use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The safety margin subtracted from every validity: ttl/100 + 2 ms.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Releasing,
    Released,
    Lost(LossReason),
}

/// A lock backend and one of its handles, as a [`Holding`]: what lets the lock
/// (and primitives built on the lock, such as election on backends without a
/// native layout) share the lease machinery with every other primitive.
pub struct Bound<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) handle: B::Handle,
}

impl<B: Backend> std::fmt::Debug for Bound<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Bound<B> {
    /// Pairs a backend with a handle it returned.
    pub fn new(backend: Arc<B>, handle: B::Handle) -> Self {
        Bound { backend, handle }
    }
}

#[async_trait]
impl<B: Backend> Holding for Bound<B> {
    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        self.backend.renew(&self.handle, ttl).await
    }
    async fn release(&self) -> Result<Ownership, LockError> {
        self.backend.release(&self.handle).await
    }
    fn backend_name(&self) -> &'static str {
        self.backend.name()
    }
    fn loss_signal(&self) -> Option<LossSignal> {
        self.backend.loss_signal(&self.handle)
    }
    fn abandoned(&self) {
        self.backend.abandoned(&self.handle)
    }
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
        }
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

    fn status(&self) -> Status {
        *self.status.borrow()
    }

    pub fn is_held(&self) -> bool {
        self.status() == Status::Held && Instant::now() < self.deadline()
    }

    /// Moves `from` → `to` atomically; returns the status found.
    fn transition(&self, from: Status, to: Status) -> Status {
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
        // Every way out of `Held` passes here exactly once: the hold ends now.
        if from == Status::Held && found == Status::Held {
            self.metrics.hold_ended(&self.hold);
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

    fn lost_error(&self, reason: LossReason) -> LockError {
        LockError::Lost {
            key: self.key.clone(),
            reason,
        }
    }

    /// The error to report when the lease is no longer held, if it is not.
    fn check_held(&self) -> Result<(), LockError> {
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
    fn leave(self: &Arc<Self>) -> bool {
        match &self.reentry {
            Some(reentry) => reentry.registry.leave(&self.key, &reentry.owner, self),
            None => true,
        }
    }

    /// Releases on the backend after the status went Held → Releasing.
    async fn finish_release(&self) -> Result<(), LockError> {
        let outcome = self.ops.release().await;
        match outcome {
            Ok(Ownership::Held) => {
                self.status.send_replace(Status::Released);
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
                self.status.send_replace(Status::Released);
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
            match tokio::time::timeout(self.ttl.min(left), self.ops.release()).await {
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

/// A held lock. Keep it while you work; check [`Lease::is_held`] or run the work
/// under [`Lease::guard`], and pass [`Lease::token`] to every write.
///
/// Dropping it stops renewal and releases the lock in the background (when a tokio
/// runtime is running); the ttl frees it otherwise.
pub struct Lease {
    shared: Arc<Shared>,
    finished: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("backend", &self.shared.backend)
            .field("key", &self.shared.key)
            .field("token", &self.shared.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Lease {
    /// Starts the watchdog for a fresh acquisition.
    pub(crate) fn start(
        shared: Arc<Shared>,
        renew_every: Option<Duration>,
        max_hold: Option<Duration>,
        loss: Option<LossSignal>,
    ) -> Lease {
        let max_hold_at = max_hold.and_then(|d| Instant::now().checked_add(d));
        tokio::spawn(crate::renewal::watchdog(
            shared.clone(),
            renew_every,
            max_hold_at,
            loss,
        ));
        Lease {
            shared,
            finished: false,
        }
    }

    /// Another handle on a lease already held by the same owner.
    pub(crate) fn reentered(shared: Arc<Shared>) -> Lease {
        Lease {
            shared,
            finished: false,
        }
    }

    /// The owner identity this lease was acquired for, if any.
    pub fn owner(&self) -> Option<&Owner> {
        self.shared.reentry.as_ref().map(|r| &r.owner)
    }

    /// The fencing token: strictly greater than every earlier holder's token for
    /// this key.
    pub fn token(&self) -> FencingToken {
        self.shared.token
    }

    /// The lock name.
    pub fn key(&self) -> &LockKey {
        &self.shared.key
    }

    /// True while the lease is not lost and before its local deadline. A local
    /// check: no round trip.
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// Time left before the local deadline; zero once the lease is not held.
    pub fn remaining(&self) -> Duration {
        if self.shared.status() != Status::Held {
            return Duration::ZERO;
        }
        self.shared
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Completes when the lease is known lost: renewal failed past the deadline,
    /// the backend reported the lock gone or the session ended, or `max_hold`
    /// elapsed. Never completes after a normal release.
    pub fn lost(&self) -> Lost {
        let mut status = self.shared.status.subscribe();
        Lost(Box::pin(async move {
            if let Ok(found) = status.wait_for(|s| matches!(s, Status::Lost(_))).await
                && let Status::Lost(reason) = *found
            {
                return reason;
            }
            // The lease ended without loss: this signal never fires.
            std::future::pending().await
        }))
    }

    /// `Ok` while held; the `Lost` error with its reason otherwise.
    pub(crate) fn check_held(&self) -> Result<(), LockError> {
        self.shared.check_held()
    }

    /// Runs `work` until it finishes or the lease is lost, whichever comes first.
    /// On loss `work` is dropped and `Err(LockError::Lost)` returned.
    pub async fn guard<F: Future>(&self, work: F) -> Result<F::Output, LockError> {
        self.shared.check_held()?;
        tokio::select! {
            biased;
            reason = self.lost() => Err(self.shared.lost_error(reason)),
            out = work => Ok(out),
        }
    }

    /// Extends the lease by its ttl now. Needed with `Renewal::Manual`; harmless
    /// with automatic renewal.
    pub async fn renew(&self) -> Result<(), LockError> {
        let shared = &self.shared;
        shared.check_held()?;
        let sent_at = Instant::now();
        match shared.ops.renew(shared.ttl).await? {
            Ownership::Held => {
                shared.check_held()?;
                shared.extend(sent_at);
                shared.metrics.renewed();
                Ok(())
            }
            Ownership::NotHeld => {
                shared.mark_lost(LossReason::Revoked);
                Err(shared.lost_error(LossReason::Revoked))
            }
        }
    }

    /// Stops renewal and frees the lock if this lease still owns it (owner and
    /// token are compared atomically on the server, so a newer holder is never
    /// touched). A lease that was already lost gives `LockError::Lost`.
    ///
    /// With reentrant holders, only the last release frees the lock. The release
    /// runs to completion even if this future is dropped.
    ///
    /// `release` consumes the lease, so one acquisition cannot be released twice:
    ///
    /// ```compile_fail
    /// # async fn twice(lease: distlock_core::Lease) {
    /// lease.release().await.ok();
    /// lease.release().await.ok(); // error: use of moved value
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        self.finished = true;
        let shared = self.shared.clone();
        if !shared.leave() {
            return shared.check_held();
        }
        match shared.transition(Status::Held, Status::Releasing) {
            Status::Held => {}
            Status::Lost(reason) => return Err(shared.lost_error(reason)),
            _ => return Err(shared.lost_error(LossReason::Revoked)),
        }
        // If the caller is cancelled mid-release, finish it in the background
        // rather than leave the lock to its ttl.
        let unfinished = CancelGuard::new(shared.clone(), |shared: Arc<Shared>| {
            Some(Box::pin(async move {
                let _ = shared.finish_release().await;
            }) as UndoFuture)
        });
        let result = shared.finish_release().await;
        unfinished.disarm();
        result
    }

    /// Stops renewal and forgets the lease *without* releasing: the server frees
    /// the lock when its ttl runs out. Use it to keep others out for the rest of
    /// the ttl (run at most once per interval), or to simulate a crashed holder.
    pub fn abandon(mut self) {
        self.finished = true;
        if self.shared.leave() {
            self.shared.transition(Status::Held, Status::Released);
            self.shared.ops.abandoned();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.finished || !self.shared.leave() {
            return;
        }
        if self.shared.transition(Status::Held, Status::Releasing) != Status::Held {
            return;
        }
        let shared = self.shared.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // A failure is logged by `finish_release`; nobody awaits it here.
                runtime.spawn(async move {
                    let _ = shared.finish_release().await;
                });
            }
            Err(_) => {
                shared.status.send_replace(Status::Released);
            }
        }
    }
}

/// The future returned by [`Lease::lost`]; it owns what it needs, so it can be
/// moved into another task.
pub struct Lost(Pin<Box<dyn Future<Output = LossReason> + Send>>);

impl std::fmt::Debug for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lost")
    }
}

impl Future for Lost {
    type Output = LossReason;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LossReason> {
        self.0.as_mut().poll(cx)
    }
}
