//! The lease lifecycle, written once for every adapter: the local deadline, the
//! lost signal, release and release on drop (the renewal watchdog is in
//! `renewal.rs`, started once the lease outlives `keeper.rs`'s grace). Reentrant
//! handles share one lease; their bookkeeping is in `reentry.rs`. The state the
//! handles share (status, deadline, release on the backend) is in
//! `lease/shared.rs`.
//!
//! Invariant: a lease believes it holds the lock only before
//! `sent_at + ttl - drift`, where `sent_at` was taken before the acquire or renew
//! request went out. Any server measures its expiry from a later instant, so the
//! client stops believing first (given sane clock rates).

use crate::backend::{LossSignal, Ownership};
use crate::toolkit::{CancelGuard, UndoFuture};
use crate::{FencingToken, LockError, LockKey, LossReason, Owner};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

mod bound;
mod keeper;
mod renewal;
mod shared;

pub use bound::Bound;
pub(crate) use shared::{Shared, Status};

/// The safety margin subtracted from every validity: ttl/100 + 2 ms.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
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
        let began = Instant::now();
        shared.set_loss(loss);
        keeper::watch(renewal::Watchdog {
            shared: shared.clone(),
            renew_every,
            max_hold_at: max_hold.and_then(|d| began.checked_add(d)),
            began,
        });
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
        match shared.ops.renew(shared.renew_ttl(sent_at)).await? {
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
    /// touched). A lease that was already lost, or is past its local
    /// deadline (even if its watchdog has not run since, as in a stalled
    /// process), gives `LockError::Lost`; the lock is then still given back
    /// in the background if the server kept it.
    ///
    /// With reentrant holders, only the last release frees the lock. The release
    /// runs to completion even if this future is dropped. Before the
    /// acquisition's `min_hold` ends, releasing leaves the lock held on the
    /// server until then (its expiry set to the time left), and the server
    /// frees it by itself.
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
        // Past its local deadline the lease is lost, whether or not its
        // watchdog has run since (a stalled process runs neither on time):
        // its loss is reported now, never a successful release, and the lock
        // is still given back in case the server kept it.
        if Instant::now() >= shared.deadline() && shared.mark_lost(LossReason::Expired) {
            let error = shared.lost_error(LossReason::Expired);
            tokio::spawn(async move { shared.release_after_loss().await });
            return Err(error);
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

    /// Makes the release of this acquisition delete the lock even within its
    /// minimum hold: for leases taken as part of a set that could not be
    /// taken whole, which were never the caller's.
    pub(crate) fn forgo_min_hold(&self) {
        self.shared
            .hold_forgone
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Stops renewal and forgets the lease *without* releasing: the server frees
    /// the lock when its ttl runs out (or its `min_hold` ends, if later). Use it to keep others out for the rest of
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
            Err(_) => shared.mark_released(),
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
