//! Several locks taken as one: [`MultiLease`], from
//! [`DistributedLockExt::acquire_all`](crate::DistributedLockExt::acquire_all).
//!
//! Invariants:
//! - Keys are taken in one canonical order (sorted, deduplicated), so two
//!   callers with overlapping sets never wait for each other in a cycle.
//! - All or nothing: when any key fails, the ones taken are released (and the
//!   release awaited) before the error is returned; when the caller drops the
//!   future, each lease taken releases itself on drop.
//! - The wait in the options is one budget for the whole set.

use crate::{
    AcquireOptions, DistributedLock, FencingToken, Held, Lease, LockError, LockKey, LossReason,
    Lost, Wait,
};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Every key of one [`acquire_all`](crate::DistributedLockExt::acquire_all),
/// held together. Each member is an ordinary [`Lease`], renewed on its own.
///
/// Dropping it releases every member in the background, as dropping a `Lease`
/// does; [`Held::release`] releases them and reports how it went.
#[derive(Debug)]
pub struct MultiLease {
    backend: &'static str,
    /// In canonical (sorted) key order.
    leases: Vec<Lease>,
}

impl MultiLease {
    /// The keys, in the order they were taken (sorted).
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> + '_ {
        self.leases.iter().map(Lease::key)
    }

    /// The token of `key`, if it is one of the keys held.
    pub fn token(&self, key: &LockKey) -> Option<FencingToken> {
        self.lease(key).map(Lease::token)
    }

    /// The member leases, in key order.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The lease of `key`, if it is one of the keys held.
    pub fn lease(&self, key: &LockKey) -> Option<&Lease> {
        self.leases.iter().find(|lease| lease.key() == key)
    }

    /// The member leases, to release or keep one by one.
    pub fn into_leases(self) -> Vec<Lease> {
        self.leases
    }
}

/// Every member at once: held while all are, lost when any is (with its key),
/// released together.
impl Held for MultiLease {
    type Lost = AnyLost;

    /// Each key with its fencing token. A write to a resource carries the token
    /// of the lock that protects that resource.
    fn tokens(&self) -> impl Iterator<Item = (&LockKey, FencingToken)> + '_ {
        self.leases.iter().map(|lease| (lease.key(), lease.token()))
    }

    /// True while every member is held (a local check, as [`Lease::is_held`]).
    fn is_held(&self) -> bool {
        self.leases.iter().all(Lease::is_held)
    }

    /// The time left before the first member's local deadline.
    fn remaining(&self) -> Duration {
        self.leases
            .iter()
            .map(Lease::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Completes when any member is lost, with that member's key and why. Never
    /// completes after a normal release.
    fn lost(&self) -> AnyLost {
        AnyLost {
            members: self
                .leases
                .iter()
                .map(|lease| (lease.key().clone(), lease.lost()))
                .collect(),
        }
    }

    /// Runs `work` until it finishes or any member is lost, whichever comes
    /// first. On loss `work` is dropped and `LockError::Lost` names the key.
    async fn guard<F: Future>(&self, work: F) -> Result<F::Output, LockError> {
        for lease in &self.leases {
            lease.check_held()?;
        }
        tokio::select! {
            biased;
            (key, reason) = self.lost() => Err(LockError::Lost { key, reason }),
            out = work => Ok(out),
        }
    }

    /// Renews every member in key order; the first failure stops and is
    /// returned (the members after it keep their own renewal).
    async fn renew(&self) -> Result<(), LockError> {
        for lease in &self.leases {
            lease.renew().await?;
        }
        Ok(())
    }

    /// Releases every member (all at once) and returns the first error in key
    /// order; a member that fails does not stop the others' release. A member
    /// lost before gives `LockError::Lost`, as [`Lease::release`] does.
    async fn release(self) -> Result<(), LockError> {
        release_all(self.leases, self.backend).await
    }

    /// Abandons every member (see [`Lease::abandon`]).
    fn abandon(self) {
        self.leases.into_iter().for_each(Lease::abandon);
    }
}

/// The future returned by [`MultiLease`]'s [`Held::lost`]: the first member's loss.
pub struct AnyLost {
    members: Vec<(LockKey, Lost)>,
}

impl std::fmt::Debug for AnyLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyLost")
            .field("keys", &self.members.len())
            .finish()
    }
}

impl Future for AnyLost {
    type Output = (LockKey, LossReason);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Each member registers the waker; the first to fire wins.
        for (key, lost) in &mut self.members {
            if let Poll::Ready(reason) = Pin::new(lost).poll(cx) {
                return Poll::Ready((key.clone(), reason));
            }
        }
        Poll::Pending
    }
}

/// See [`DistributedLockExt::acquire_all`](crate::DistributedLockExt::acquire_all).
pub(crate) async fn acquire_all<L: DistributedLock + ?Sized>(
    lock: &L,
    keys: &[LockKey],
    opts: &AcquireOptions,
) -> Result<MultiLease, LockError> {
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Err(LockError::invalid_options(
            "acquire_all got no keys; give it at least one",
        ));
    }
    // Refuse bad options before anything is taken.
    opts.validate(&lock.capabilities())?;
    let started = Instant::now();
    let deadline = match opts.get_wait() {
        Wait::For(budget) => started.checked_add(budget),
        Wait::No | Wait::Forever => None,
    };
    let mut taken = Vec::with_capacity(keys.len());
    for key in &keys {
        let wait = match (opts.get_wait(), deadline) {
            (Wait::For(_), Some(at)) => Wait::For(at.saturating_duration_since(Instant::now())),
            (wait, _) => wait,
        };
        match lock.acquire(key, &opts.clone().wait(wait)).await {
            Ok(lease) => taken.push(lease),
            Err(error) => {
                // Awaited, not left to drop: the caller may retry, or check
                // that the other keys are free, as soon as it has the error.
                // They were never the caller's: no minimum hold keeps them.
                taken.iter().for_each(Lease::forgo_min_hold);
                if let Err(e) = release_all(taken, lock.name()).await {
                    tracing::debug!(key = %key, error = %e, "releasing the keys taken before a failure failed; their ttl frees them");
                }
                return Err(match error {
                    LockError::Timeout { key, .. } => LockError::Timeout {
                        key,
                        waited: started.elapsed(),
                    },
                    other => other,
                });
            }
        }
    }
    Ok(MultiLease {
        leases: taken,
        backend: lock.name(),
    })
}

/// Releases every lease concurrently; the first error in their order wins.
/// Each release runs in its own task, so it completes even if the caller
/// stops waiting for it.
async fn release_all(leases: Vec<Lease>, backend: &'static str) -> Result<(), LockError> {
    let releases: Vec<_> = leases
        .into_iter()
        .map(|lease| tokio::spawn(lease.release()))
        .collect();
    let mut first = Ok(());
    for release in releases {
        let outcome = release
            .await
            .unwrap_or_else(|e| Err(LockError::backend(backend, e)));
        if first.is_ok() {
            first = outcome;
        }
    }
    first
}
