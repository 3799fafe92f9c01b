//! Semaphores with numbered permits: at most `limit` holders of one name at a
//! time, each with a slot in `0..limit` that no other live permit has (a
//! Snowflake worker id, a shard number). A [`Permit`] is a lease: renewal, the
//! local deadline, `lost()` and release on drop come from core's lease
//! machinery, exactly as for the lock.

use crate::backend::{AcquireRequest, Acquired, Holding, WaitUntil};
use crate::permit::Permit;
use crate::start::{self, Won};
use crate::wrapped::Wrapped;
use crate::{AcquireOptions, Capabilities, FencingToken, HolderMeta, LockError, LockKey, Wait};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;

/// The largest number of permits one semaphore may have.
pub const MAX_PERMITS: u32 = 4096;

/// A semaphore client. Every adapter that offers semaphores implements it
/// (see [`Capabilities::primitives`]).
///
/// Both acquire calls are cancel-safe: dropping the future leaves no permit or
/// queue entry behind. Every client of one name must use the same `limit`;
/// a different one gives [`LockError::LimitMismatch`] while permits are held or
/// awaited, never a silent mix.
///
/// ```
/// use distlock_core::prelude::*;
/// use distlock_core::{AcquireOptions, LockKey, memory::MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let workers = MemoryStore::new().semaphore_client();
/// let key = LockKey::new("snowflake/worker-ids")?;
/// let permit = workers.acquire(&key, 1024, &AcquireOptions::new()).await?;
/// println!("worker id {} (token {})", permit.slot(), permit.token());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedSemaphore: Send + Sync + std::fmt::Debug {
    /// Takes one of `limit` permits on `key`, waiting per `opts.wait`. A wait
    /// that ends without a permit gives `Timeout` (`Busy` for `Wait::No`).
    /// `opts.owner` is refused: a permit is not reentrant (each acquire takes
    /// one more permit).
    async fn acquire(
        &self,
        key: &LockKey,
        limit: u32,
        opts: &AcquireOptions,
    ) -> Result<Permit, LockError>;

    /// One attempt: `None` when all `limit` permits are taken.
    async fn try_acquire(
        &self,
        key: &LockKey,
        limit: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<Permit>, LockError> {
        match self.acquire(key, limit, &opts.clone().wait(Wait::No)).await {
            Ok(permit) => Ok(Some(permit)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// A short backend name, such as `redis`.
    fn name(&self) -> &'static str;

    /// Server-side inspection of permits, when the backend offers it.
    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        None
    }
}

/// A shareable semaphore client of any backend.
pub type DynSemaphore = Arc<dyn DistributedSemaphore>;

/// One live permit as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// Its slot, in `0..limit`.
    pub slot: u32,
    /// Its fencing token.
    pub token: FencingToken,
    /// Who holds it, as the backend records it.
    pub holder: String,
}

impl PermitInfo {
    /// A permit as an adapter read it from the server.
    pub fn new(slot: u32, token: FencingToken, holder: String) -> PermitInfo {
        PermitInfo {
            slot,
            token,
            holder,
        }
    }
}

/// Server-side inspection of semaphores, for operators and the conformance
/// suite.
#[async_trait]
pub trait SemaphoreInspect: Send + Sync {
    /// The live (unexpired) permits of `key`, by slot.
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError>;

    /// Deletes the permit in `slot` behind its holder's back, as an operator
    /// would. Returns whether there was one; its holder's `lost()` fires.
    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError>;

    /// Permits and queue entries of semaphores whose name starts with
    /// `prefix`: what a crashed or cancelled client could leave behind.
    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError>;
}

/// One permit request as the adapter sees it.
#[derive(Debug, Clone, Copy)]
pub struct PermitRequest<'a> {
    /// The name, ttl and wait, as for a lock.
    pub acquire: AcquireRequest<'a>,
    /// How many permits the semaphore has (validated: 1 to [`MAX_PERMITS`]).
    pub limit: u32,
}

impl PermitRequest<'_> {
    /// The error for a limit that disagrees with the one in use.
    pub fn mismatch(&self, existing: u32) -> LockError {
        LockError::LimitMismatch {
            key: self.acquire.key.clone(),
            requested: self.limit,
            existing,
        }
    }
}

/// What the adapter returns when it won a permit.
#[derive(Debug)]
pub struct AcquiredPermit<P> {
    /// The permit's handle, token and send time, as for a lock.
    pub acquired: Acquired<P>,
    /// Its slot, in `0..limit`, unique among live permits.
    pub slot: u32,
}

/// What a semaphore adapter implements: the acquire step. Renewal, release and
/// loss go through the permit's [`Holding`], and core does the rest.
#[async_trait]
pub trait SemaphoreBackend: Send + Sync + 'static {
    /// A held permit: renews and releases itself.
    type Permit: Holding;

    /// A short backend name, such as `redis`.
    fn name(&self) -> &'static str;

    /// What the backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// Takes a permit, waiting per `req.acquire.wait`; gives
    /// `req.acquire.not_acquired()` when the wait ends and
    /// [`PermitRequest::mismatch`] when the limit in use differs. Must be
    /// cancel-safe.
    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<Self::Permit>, LockError>;

    /// Server-side inspection, when the backend offers it.
    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        None
    }
}

/// Any [`SemaphoreBackend`] as a [`DistributedSemaphore`], with the lease
/// lifecycle and metrics provided by core.
pub struct BackendSemaphore<S: SemaphoreBackend>(pub(crate) Wrapped<S>);

impl<S: SemaphoreBackend> std::fmt::Debug for BackendSemaphore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug(f, "BackendSemaphore", self.0.backend.name())
    }
}

impl<S: SemaphoreBackend> BackendSemaphore<S> {
    /// Wraps a connected adapter.
    pub fn new(backend: S) -> Self {
        let name = backend.name();
        BackendSemaphore(Wrapped::new(backend, name))
    }

    /// The adapter, for backend-specific calls.
    pub fn backend(&self) -> &S {
        &self.0.backend
    }
}

/// Refuses a limit outside `1..=MAX_PERMITS` and an owner (permits are not
/// reentrant).
fn validate(limit: u32, opts: &AcquireOptions, caps: &Capabilities) -> Result<(), LockError> {
    opts.validate(caps)?;
    if limit == 0 || limit > MAX_PERMITS {
        return Err(LockError::invalid_options(format!(
            "a semaphore needs 1 to {MAX_PERMITS} permits (got {limit})"
        )));
    }
    if opts.get_owner().is_some() {
        return Err(LockError::invalid_options(
            "permits are not reentrant (each acquire takes another permit); drop the owner",
        ));
    }
    Ok(())
}

#[async_trait]
impl<S: SemaphoreBackend> DistributedSemaphore for BackendSemaphore<S> {
    async fn acquire(
        &self,
        key: &LockKey,
        limit: u32,
        opts: &AcquireOptions,
    ) -> Result<Permit, LockError> {
        let opts = &self.0.defaults.fill(opts);
        validate(limit, opts, &self.0.backend.capabilities())?;
        let started = Instant::now();
        let meta = HolderMeta::this_process().labelled(opts.get_label());
        let req = PermitRequest {
            acquire: AcquireRequest {
                key,
                ttl: opts.grant_ttl(),
                wait: WaitUntil::from_wait(opts.get_wait(), started),
                started,
                meta: &meta,
            },
            limit,
        };
        let won = self.0.backend.acquire_permit(req).await?;
        let slot = won.slot;
        let won = Won {
            holding: Arc::new(won.acquired.handle),
            token: won.acquired.token,
            sent_at: won.acquired.sent_at,
        };
        let lease = start::begin(key, won, opts, started, &self.0.metrics, None)?;
        tracing::debug!(backend = self.0.backend.name(), key = %key, slot, limit, token = %lease.token(), "permit acquired");
        Ok(Permit::new(lease, slot, limit))
    }

    fn capabilities(&self) -> Capabilities {
        self.0.backend.capabilities()
    }

    fn name(&self) -> &'static str {
        self.0.backend.name()
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        self.0.backend.inspect()
    }
}

/// The lowest slot in `0..limit` not in `taken`: slots are reused after release
/// and expiry, so worker ids stay dense.
pub fn lowest_free_slot(limit: u32, taken: impl IntoIterator<Item = u32>) -> Option<u32> {
    let mut used: Vec<u32> = taken.into_iter().collect();
    used.sort_unstable();
    used.dedup();
    let mut slot = 0;
    for u in used {
        if u > slot {
            break;
        }
        if u == slot {
            slot += 1;
        }
    }
    (slot < limit).then_some(slot)
}
