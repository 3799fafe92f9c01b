//! Conveniences over any [`DistributedLock`]: run work under a lock
//! ([`DistributedLockExt::with_lock`]) and take several locks at once without
//! deadlock ([`DistributedLockExt::acquire_all`]).
//!
//! They are an extension trait rather than methods of `DistributedLock` so
//! that adapters cannot override them: the lease lifecycle they rely on is
//! written once, in core.

use crate::multi::{MultiLease, acquire_all};
use crate::{AcquireOptions, DistributedLock, Lease, LockError, LockKey};
use std::future::Future;

/// What every [`DistributedLock`] (`DynLock` included) offers beyond acquire:
/// work run under a lock, and several locks taken at once.
///
/// Implemented for every lock type; bring it into scope with
/// `use distlock_core::DistributedLockExt`.
pub trait DistributedLockExt: DistributedLock {
    /// Acquires `key`, runs `work` while the lease is held, releases, and
    /// returns the work's own result.
    ///
    /// - The work runs under [`Lease::guard`]: if the lease is lost meanwhile,
    ///   the work is dropped at its next await and `LockError::Lost` is
    ///   returned (converted into `E`).
    /// - A work error is returned as it is, after the lock was released.
    /// - The lock is released after the work, also when the work fails or this
    ///   future is dropped (the lease's drop releases it then).
    /// - A release that finds the lock already gone (`LockError::Lost`) after
    ///   the work succeeded is returned as an error: the backend took the lock
    ///   away at some point, perhaps while the work ran, so the work may not
    ///   have been alone. Any other release failure (the server unreachable) is
    ///   only logged: the lease was held throughout by its local deadline, and
    ///   the ttl frees the lock.
    ///
    /// Why `Result<T, E>` with `E: From<LockError>`: the caller's own error
    /// type comes back untouched (no nested `Result<Result<T, E>, LockError>`
    /// to unpack, no work error flattened into a `LockError`), and lock
    /// failures convert into it with one `?` (`anyhow::Error`, a `thiserror`
    /// enum with a `#[from] LockError` variant, or `LockError` itself).
    ///
    /// The work gets the lease to read its token and key: copy what it needs
    /// into the future it returns. That future cannot borrow the lease, which
    /// keeps `with_lock` usable inside `tokio::spawn`.
    ///
    /// ```
    /// use distlock_core::{AcquireOptions, DistributedLockExt, LockError, LockKey};
    /// use distlock_core::memory::MemoryStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let lock = MemoryStore::new().client();
    /// let key = LockKey::new("reports/daily")?;
    /// let token = lock
    ///     .with_lock(&key, &AcquireOptions::new(), |lease| {
    ///         let token = lease.token();
    ///         async move {
    ///             // Pass `token` to every write the work makes.
    ///             Ok::<_, LockError>(token)
    ///         }
    ///     })
    ///     .await?;
    /// println!("the report ran under token {token}");
    /// # Ok(()) }
    /// ```
    fn with_lock<'a, F, Fut, T, E>(
        &'a self,
        key: &'a LockKey,
        opts: &'a AcquireOptions,
        work: F,
    ) -> impl Future<Output = Result<T, E>> + Send + 'a
    where
        F: FnOnce(&Lease) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, E>> + Send + 'a,
        T: Send + 'a,
        E: From<LockError> + Send + 'a,
    {
        async move {
            let lease = self.acquire(key, opts).await?;
            let outcome = lease.guard(work(&lease)).await;
            let released = lease.release().await;
            match (outcome, released) {
                // The work was stopped; the release can only repeat the loss.
                (Err(lost), _) => Err(lost.into()),
                (Ok(Err(work_error)), released) => {
                    if let Err(e) = released {
                        tracing::debug!(key = %key, error = %e, "release after failed work failed");
                    }
                    Err(work_error)
                }
                (Ok(Ok(value)), Ok(())) => Ok(value),
                (Ok(Ok(_)), Err(lost @ LockError::Lost { .. })) => Err(lost.into()),
                (Ok(Ok(value)), Err(e)) => {
                    tracing::warn!(key = %key, error = %e, "release after the work failed; the ttl frees the lock");
                    Ok(value)
                }
            }
        }
    }

    /// Acquires every key of `keys`, all or nothing, in one canonical order
    /// (sorted, duplicates removed): two callers taking `{a, b}` and `{b, a}`
    /// both start with `a`, so neither can hold one key while waiting for the
    /// other's.
    ///
    /// `opts` applies to every key, and its wait is one budget for the whole
    /// set: with `Wait::For(d)` the call gives up `d` after it started, not
    /// `d` per key (`LockError::Timeout` names the key it was waiting for);
    /// with `Wait::No` any held key gives `LockError::Busy`.
    ///
    /// On any failure the keys already taken are released before the error is
    /// returned, so they are free when it arrives. If this future is dropped
    /// mid-way, the acquire in flight undoes itself and the leases taken so far
    /// are released by their drop, at once, in the background.
    ///
    /// An empty `keys` is refused with `LockError::InvalidOptions`.
    ///
    /// ```
    /// use distlock_core::prelude::*;
    /// use distlock_core::{AcquireOptions, LockKey};
    /// use distlock_core::memory::MemoryStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let lock = MemoryStore::new().client();
    /// let keys = [LockKey::new("accounts/bob")?, LockKey::new("accounts/alice")?];
    /// let both = lock.acquire_all(&keys, &AcquireOptions::new()).await?;
    /// for (key, token) in both.tokens() {
    ///     println!("{key}: fence writes with {token}");
    /// }
    /// both.guard(async { /* move money between the two accounts */ }).await?;
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    fn acquire_all<'a>(
        &'a self,
        keys: &'a [LockKey],
        opts: &'a AcquireOptions,
    ) -> impl Future<Output = Result<MultiLease, LockError>> + Send + 'a {
        acquire_all(self, keys, opts)
    }
}

impl<L: DistributedLock + ?Sized> DistributedLockExt for L {}
