//! What every held thing shares: [`Held`], implemented by [`Lease`],
//! [`Permit`](crate::Permit), [`Leadership`](crate::Leadership),
//! [`RwLease`](crate::RwLease) and [`MultiLease`](crate::MultiLease).
//!
//! The three guards around one lease get all of it from [`SingleLease`]: they
//! name their lease, and the lease's own methods do the work, so the lifecycle
//! is written once, in `lease.rs`.

use crate::{FencingToken, Lease, LockError, LockKey, Lost};
use std::future::Future;
use std::time::Duration;

/// Anything held: a lock's [`Lease`], a semaphore [`Permit`](crate::Permit), a
/// [`Leadership`](crate::Leadership), a read or write
/// [`RwLease`](crate::RwLease), or every key of a
/// [`MultiLease`](crate::MultiLease). One spelling per idea across all five:
/// check [`Held::is_held`] or run the work under [`Held::guard`], pass the
/// fencing token to every write, end with [`Held::release`].
///
/// **Tokens.** A single lease has one key and one token
/// ([`SingleLease::token`], [`SingleLease::key`]). A `MultiLease` holds
/// several keys, each with its own token, and a write carries the token of
/// the lock that protects its resource; so there is no token of the whole
/// set, and [`Held::tokens`] gives each key with its token (one pair for a
/// single lease).
///
/// Bring it into scope with `use distlock::prelude::*` (or
/// `distlock_core::prelude`). The methods return plain futures, so the trait
/// is for generic code (`fn f(held: &impl Held)`), not `dyn`; a future from a
/// concrete guard is `Send` whenever the work given to it is.
///
/// ```
/// use distlock_core::prelude::*;
/// use distlock_core::{AcquireOptions, LockKey, memory::MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// async fn work_under(held: impl Held) -> Result<(), distlock_core::LockError> {
///     let keys = held.tokens().count();
///     held.guard(async { assert_eq!(keys, 1) }).await?;
///     held.release().await
/// }
/// let store = MemoryStore::new();
/// let key = LockKey::new("jobs/nightly")?;
/// work_under(store.client().acquire(&key, &AcquireOptions::new()).await?).await?;
/// work_under(store.election_client().campaign(&key, "node-a", &AcquireOptions::new()).await?).await?;
/// # Ok(()) }
/// ```
pub trait Held: Sized + Send + Sync {
    /// What [`Held::lost`] returns: [`Lost`] (completing with the reason) for
    /// one lease, [`AnyLost`](crate::AnyLost) (the key and the reason) for a
    /// `MultiLease`.
    type Lost: Future + Send + 'static;

    /// Each key held with its fencing token, in key order: one pair for a
    /// single lease.
    fn tokens(&self) -> impl Iterator<Item = (&LockKey, FencingToken)> + '_;

    /// True while nothing held is lost and before the local deadline. A local
    /// check: no round trip.
    fn is_held(&self) -> bool;

    /// Time left before the (first) local deadline; zero once not held.
    fn remaining(&self) -> Duration;

    /// Completes when the hold is known lost: renewal failed past the
    /// deadline, the backend reported it gone or the session ended, or
    /// `max_hold` elapsed. Never completes after a normal release.
    fn lost(&self) -> Self::Lost;

    /// Runs `work` until it finishes or the hold is lost, whichever comes
    /// first. On loss `work` is dropped and `Err(LockError::Lost)` returned.
    fn guard<F: Future>(&self, work: F) -> impl Future<Output = Result<F::Output, LockError>>;

    /// Extends the hold by its ttl now. Needed with `Renewal::Manual`;
    /// harmless with automatic renewal.
    fn renew(&self) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Stops renewal and gives back what is still ours (compared atomically on
    /// the server, so a newer holder is never touched). A hold already lost
    /// gives `LockError::Lost`. It runs to completion even if this future is
    /// dropped.
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Stops renewal and forgets the hold *without* giving it back: the server
    /// frees it when its ttl runs out (keep others out for the rest of the
    /// ttl, or simulate a crashed holder).
    fn abandon(self);
}

/// A held thing that is one [`Lease`] underneath (the lease itself, a permit,
/// a leadership, a read or write share): naming the lease gives [`Held`] and
/// the one key and token.
pub trait SingleLease: Sized + Send + Sync {
    /// The underlying lease.
    fn lease(&self) -> &Lease;

    /// The underlying lease, for code written against [`Lease`] (the CLI's
    /// `run`, say).
    fn into_lease(self) -> Lease;

    /// The fencing token: strictly greater than every earlier holder's token
    /// of this name (for a leadership, the term; for read-write shares, see
    /// [`DistributedRwLock`](crate::DistributedRwLock)).
    fn token(&self) -> FencingToken {
        Lease::token(self.lease())
    }

    /// The name held: the lock's, semaphore's, election's or read-write
    /// lock's.
    fn key(&self) -> &LockKey {
        Lease::key(self.lease())
    }
}

impl<T: SingleLease> Held for T {
    type Lost = Lost;

    fn tokens(&self) -> impl Iterator<Item = (&LockKey, FencingToken)> + '_ {
        std::iter::once((self.key(), self.token()))
    }

    fn is_held(&self) -> bool {
        Lease::is_held(self.lease())
    }

    fn remaining(&self) -> Duration {
        Lease::remaining(self.lease())
    }

    fn lost(&self) -> Lost {
        Lease::lost(self.lease())
    }

    fn guard<F: Future>(&self, work: F) -> impl Future<Output = Result<F::Output, LockError>> {
        Lease::guard(self.lease(), work)
    }

    fn renew(&self) -> impl Future<Output = Result<(), LockError>> + Send {
        Lease::renew(self.lease())
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        Lease::release(self.into_lease())
    }

    fn abandon(self) {
        Lease::abandon(self.into_lease())
    }
}

impl SingleLease for Lease {
    fn lease(&self) -> &Lease {
        self
    }

    fn into_lease(self) -> Lease {
        self
    }
}
