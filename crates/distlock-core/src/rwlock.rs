//! Read-write locks: many readers hold a name at once, a writer holds it alone.
//! Each share is a lease ([`RwLease`]): renewal, the local deadline, `lost()`,
//! release and release on drop come from core's lease machinery, exactly as for
//! the lock. The policy and the meaning of tokens are on [`DistributedRwLock`].

use crate::backend::{AcquireRequest, Acquired, Backend, Holding, WaitUntil};
use crate::lease::Bound;
use crate::start::{self, Won};
use crate::wrapped::Wrapped;
use crate::{
    AcquireOptions, Capabilities, FencingToken, HolderMeta, Lease, LockError, LockKey, SingleLease,
    Wait,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;

/// Which share of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// A shared read lease: held together with other readers.
    Read,
    /// An exclusive write lease: held alone.
    Write,
}

impl std::fmt::Display for RwMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        })
    }
}

/// A read-write lock client. Every adapter that offers read-write locks
/// implements it (see [`Capabilities::primitives`]); the read-write lock of a
/// name is independent of the plain lock of the same name.
///
/// Both acquire calls are cancel-safe: dropping the future leaves no share or
/// queue entry behind.
///
/// **Policy: queue order.** Requests are served in arrival order. A reader is
/// granted when no writer holds the lock and no writer arrived before it; a
/// writer when nobody holds the lock and nobody arrived before it. So a waiting
/// writer is never starved by a stream of readers: readers that arrive after it
/// queue behind it (Curator's `InterProcessReadWriteLock` and etcd's revision
/// order give the same).
///
/// **Tokens.** Every share, read or write, gets a token from one rising source
/// per name. So a write lease's token is greater than the token of every lease
/// (read or write) granted before it, and a read lease's token is greater than
/// the token of every write lease that ended before it began: a store that
/// records the highest write token it applied can tell a reader that began
/// before that write, and a [`crate::Fence`] refuses a deposed writer. Readers
/// holding at the same time have distinct tokens.
///
/// ```
/// use distlock_core::prelude::*;
/// use distlock_core::{AcquireOptions, LockKey, memory::MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let store = MemoryStore::new();
/// let (a, b) = (store.rwlock_client(), store.rwlock_client());
/// let key = LockKey::new("catalog")?;
/// let r1 = a.read(&key, &AcquireOptions::new()).await?;
/// let r2 = b.read(&key, &AcquireOptions::new()).await?; // readers share
/// assert!(b.try_write(&key, &AcquireOptions::new()).await?.is_none());
/// let last_read = r2.token();
/// r1.release().await?;
/// r2.release().await?;
/// let w = b.write(&key, &AcquireOptions::new()).await?;
/// assert!(w.token() > last_read); // a writer's token is above every earlier share's
/// w.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedRwLock: Send + Sync + std::fmt::Debug {
    /// Takes a read share of `key`, waiting per `opts.wait`. A wait that ends
    /// first gives `Timeout` (`Busy` for `Wait::No`). `opts.owner` is refused:
    /// shares are not reentrant.
    async fn read(&self, key: &LockKey, opts: &AcquireOptions) -> Result<RwLease, LockError>;

    /// Takes `key` for writing, alone, waiting per `opts.wait`.
    async fn write(&self, key: &LockKey, opts: &AcquireOptions) -> Result<RwLease, LockError>;

    /// One read attempt: `None` when a writer holds `key` or waits for it.
    async fn try_read(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Option<RwLease>, LockError> {
        busy_as_none(self.read(key, &opts.clone().wait(Wait::No)).await)
    }

    /// One write attempt: `None` when anyone holds `key` or waits for it.
    async fn try_write(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Option<RwLease>, LockError> {
        busy_as_none(self.write(key, &opts.clone().wait(Wait::No)).await)
    }

    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// A short backend name, such as `etcd`.
    fn name(&self) -> &'static str;

    /// Server-side inspection of read-write locks, when the backend offers it.
    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        None
    }
}

fn busy_as_none(result: Result<RwLease, LockError>) -> Result<Option<RwLease>, LockError> {
    match result {
        Ok(lease) => Ok(Some(lease)),
        Err(LockError::Busy { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A shareable read-write lock client of any backend.
pub type DynRwLock = Arc<dyn DistributedRwLock>;

/// One live share as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareInfo {
    /// Read or write.
    pub mode: RwMode,
    /// Its fencing token.
    pub token: FencingToken,
    /// Who holds it, as the backend records it.
    pub holder: String,
}

impl ShareInfo {
    /// A share as an adapter read it from the server.
    pub fn new(mode: RwMode, token: FencingToken, holder: String) -> ShareInfo {
        ShareInfo {
            mode,
            token,
            holder,
        }
    }
}

/// Server-side inspection of read-write locks, for operators and the
/// conformance suite.
#[async_trait]
pub trait RwLockInspect: Send + Sync {
    /// The live shares of `key` (readers, or the one writer).
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError>;

    /// Deletes every live share of `key` behind its holders' backs, as an
    /// operator's force-unlock would. Returns how many there were; their
    /// holders' `lost()` fires.
    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError>;

    /// Shares and queue entries of read-write locks whose name starts with
    /// `prefix`: what a crashed or cancelled client could leave behind.
    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError>;
}

/// What a read-write lock adapter implements: the two acquire steps. Renewal,
/// release and loss go through the share's [`Holding`], and core does the rest.
#[async_trait]
pub trait RwLockBackend: Send + Sync + 'static {
    /// A held share: renews and releases itself.
    type Share: Holding;

    /// A short backend name, such as `etcd`.
    fn name(&self) -> &'static str;

    /// What the backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// Takes a read share, waiting per `req.wait` in queue order; gives
    /// `req.not_acquired()` when the wait ends. Must be cancel-safe.
    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<Self::Share>, LockError>;

    /// Takes the write share, waiting per `req.wait` in queue order; gives
    /// `req.not_acquired()` when the wait ends. Must be cancel-safe.
    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<Self::Share>, LockError>;

    /// Server-side inspection, when the backend offers it.
    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        None
    }
}

/// A read-write lock whose shares are a lock [`Backend`]'s own handles, taken
/// in that backend's queue (etcd's revisions, ZooKeeper's sequence nodes): the
/// adapter only queues a request in a mode and inspects; the name, the
/// guarantees, renewal, release and loss are the lock's, so the
/// [`RwLockBackend`] around it is written once here.
#[async_trait]
pub trait LockQueueRwLock: RwLockInspect + 'static {
    /// The lock backend whose handles the shares are.
    type Lock: Backend;

    /// The lock backend the shares are held on.
    fn lock(&self) -> &Arc<Self::Lock>;

    /// Queues a request for a `mode` share and waits for it per `req.wait`;
    /// gives `req.not_acquired()` when the wait ends. Must be cancel-safe.
    async fn queue_up(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<<Self::Lock as Backend>::Handle>, LockError>;
}

#[async_trait]
impl<Q: LockQueueRwLock> RwLockBackend for Q {
    type Share = Bound<Q::Lock>;

    fn name(&self) -> &'static str {
        self.lock().name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock().capabilities()
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<Bound<Q::Lock>>, LockError> {
        Ok(Bound::acquired(
            self.lock(),
            self.queue_up(req, RwMode::Read).await?,
        ))
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<Bound<Q::Lock>>, LockError> {
        Ok(Bound::acquired(
            self.lock(),
            self.queue_up(req, RwMode::Write).await?,
        ))
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

/// Any [`RwLockBackend`] as a [`DistributedRwLock`], with the lease lifecycle
/// and metrics provided by core.
pub struct BackendRwLock<R: RwLockBackend>(pub(crate) Wrapped<R>);

impl<R: RwLockBackend> std::fmt::Debug for BackendRwLock<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug(f, "BackendRwLock", self.0.backend.name())
    }
}

impl<R: RwLockBackend> BackendRwLock<R> {
    /// Wraps a connected adapter.
    pub fn new(backend: R) -> Self {
        let name = backend.name();
        BackendRwLock(Wrapped::new(backend, name))
    }

    /// The adapter, for backend-specific calls.
    pub fn backend(&self) -> &R {
        &self.0.backend
    }

    async fn acquire(
        &self,
        mode: RwMode,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<RwLease, LockError> {
        let opts = &self.0.defaults.fill(opts);
        opts.validate(&self.0.backend.capabilities())?;
        if opts.get_owner().is_some() {
            return Err(LockError::invalid_options(
                "read and write shares are not reentrant (each acquire takes another share); drop the owner",
            ));
        }
        let started = Instant::now();
        let meta = HolderMeta::this_process().labelled(opts.get_label());
        let req = AcquireRequest {
            key,
            ttl: opts.grant_ttl(),
            wait: WaitUntil::from_wait(opts.get_wait(), started),
            started,
            meta: &meta,
        };
        let won = match mode {
            RwMode::Read => self.0.backend.acquire_read(req).await?,
            RwMode::Write => self.0.backend.acquire_write(req).await?,
        };
        let won = Won {
            holding: Arc::new(won.handle),
            token: won.token,
            sent_at: won.sent_at,
        };
        let lease = start::begin(key, won, opts, started, &self.0.metrics, None)?;
        tracing::debug!(backend = self.0.backend.name(), key = %key, %mode, token = %lease.token(), "share acquired");
        Ok(RwLease { lease, mode })
    }
}

#[async_trait]
impl<R: RwLockBackend> DistributedRwLock for BackendRwLock<R> {
    async fn read(&self, key: &LockKey, opts: &AcquireOptions) -> Result<RwLease, LockError> {
        self.acquire(RwMode::Read, key, opts).await
    }

    async fn write(&self, key: &LockKey, opts: &AcquireOptions) -> Result<RwLease, LockError> {
        self.acquire(RwMode::Write, key, opts).await
    }

    fn capabilities(&self) -> Capabilities {
        self.0.backend.capabilities()
    }

    fn name(&self) -> &'static str {
        self.0.backend.name()
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        self.0.backend.inspect()
    }
}

/// One held share of a read-write lock: a read share held with other readers,
/// or the write share held alone. Pass its [`token`](SingleLease::token) to
/// fenced writes: a write lease's token is greater than every earlier lease's
/// of this name; a read lease's is greater than every write lease's that ended
/// before it began (see [`DistributedRwLock`]). The rest is [`crate::Held`].
///
/// Dropping it stops renewal and gives the share back in the background.
#[derive(Debug)]
pub struct RwLease {
    lease: Lease,
    mode: RwMode,
}

impl RwLease {
    /// Read or write.
    pub fn mode(&self) -> RwMode {
        self.mode
    }
}

impl SingleLease for RwLease {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn into_lease(self) -> Lease {
        self.lease
    }
}
