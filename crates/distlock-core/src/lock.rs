//! The public lock trait, and `BackendLock`, which turns any [`Backend`] into one.

use crate::backend::{AcquireRequest, Backend, WaitUntil};
use crate::counters::{Metrics, MetricsSnapshot};
use crate::election::{BackendElection, ElectionBackend, LockElection};
use crate::lease::{Bound, Lease, Shared};
use crate::options::Defaults;
use crate::reentry::Registry;
use crate::rwlock::{BackendRwLock, RwLockBackend};
use crate::semaphore::{BackendSemaphore, SemaphoreBackend};
use crate::start::{self, Won};
use crate::telemetry::Attempt;
use crate::toolkit::Inspect;
use crate::{
    AcquireOptions, Capabilities, DynElection, DynRwLock, DynSemaphore, HolderMeta, LockError,
    LockKey, Owner, Wait,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;

/// A distributed lock client. Every adapter implements it, so applications can
/// hold an `Arc<dyn DistributedLock>` and swap backends without code changes.
///
/// Both acquire calls are cancel-safe: dropping the future at any await point
/// (`tokio::time::timeout` included) leaves no key, node, row or queue entry
/// behind.
///
/// ```
/// use distlock_core::{AcquireOptions, DistributedLock, LockKey, memory::MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let lock = MemoryStore::new().client();
/// let key = LockKey::new("reports/daily")?;
/// let lease = lock.acquire(&key, &AcquireOptions::new()).await?;
/// println!("holding {} with token {}", lease.key(), lease.token());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync + std::fmt::Debug {
    /// Acquires `key`, waiting per `opts.wait`. A wait that ends unacquired gives
    /// `LockError::Timeout` (`LockError::Busy` for `Wait::No`).
    async fn acquire(&self, key: &LockKey, opts: &AcquireOptions) -> Result<Lease, LockError>;

    /// One attempt: `None` when the lock is held elsewhere.
    async fn try_acquire(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        match self.acquire(key, &opts.clone().wait(Wait::No)).await {
            Ok(lease) => Ok(Some(lease)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The defaults this client gives every acquire option a caller leaves
    /// unset (the `ttl`, `wait`, `renewal` and `max_hold` of its URL or
    /// config): `AcquireOptions::new()` already gets them; read them to show
    /// or build on them.
    fn default_options(&self) -> AcquireOptions {
        AcquireOptions::new()
    }

    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// A short backend name, such as `redis`.
    fn name(&self) -> &'static str;

    /// This client's counters (acquisitions, renewals, losses...), when the
    /// implementation keeps them. Every adapter built on [`BackendLock`] does.
    fn metrics(&self) -> Option<MetricsSnapshot> {
        None
    }

    /// Server-side inspection (who holds a key, residue, an operator's
    /// force-unlock), when the backend offers it. Every adapter does.
    fn inspect(&self) -> Option<&dyn Inspect> {
        None
    }

    /// A semaphore client on this client's connection, when the backend offers
    /// semaphores ([`Capabilities::primitives`]).
    fn semaphore(&self) -> Option<DynSemaphore> {
        None
    }

    /// An election client on this client's connection, when the backend offers
    /// elections ([`Capabilities::primitives`]).
    fn election(&self) -> Option<DynElection> {
        None
    }

    /// A read-write lock client on this client's connection, when the backend
    /// offers read-write locks ([`Capabilities::primitives`]).
    fn rwlock(&self) -> Option<DynRwLock> {
        None
    }
}

/// A shareable lock client of any backend.
pub type DynLock = Arc<dyn DistributedLock>;

/// Any [`Backend`] as a [`DistributedLock`], with the lease lifecycle, reentrancy,
/// tracing and metrics provided by core.
pub struct BackendLock<B: Backend> {
    backend: Arc<B>,
    defaults: Defaults,
    reentrant: Arc<Registry<Shared>>,
    metrics: Arc<Metrics>,
    semaphore: Option<DynSemaphore>,
    election: Option<DynElection>,
    rwlock: Option<DynRwLock>,
}

impl<B: Backend> std::fmt::Debug for BackendLock<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendLock")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> BackendLock<B> {
    /// Wraps a connected backend.
    pub fn new(backend: B) -> Self {
        Self::shared(Arc::new(backend))
    }

    /// Wraps a connected backend that other primitives' clients share (a
    /// semaphore adapter on the same connection, say).
    pub fn shared(backend: Arc<B>) -> Self {
        let metrics = Arc::new(Metrics::new(backend.name()));
        BackendLock {
            backend,
            defaults: Defaults::default(),
            reentrant: Arc::default(),
            metrics,
            semaphore: None,
            election: None,
            rwlock: None,
        }
    }

    /// [`BackendLock::shared`], offering the semaphore, election and
    /// read-write lock that `semaphore`, `election` and `rwlock` build on the
    /// same backend: for adapters whose every primitive runs on the lock's
    /// connection.
    pub fn shared_with_primitives<S, E, R>(
        backend: Arc<B>,
        semaphore: impl FnOnce(Arc<B>) -> S,
        election: impl FnOnce(Arc<B>) -> E,
        rwlock: impl FnOnce(Arc<B>) -> R,
    ) -> Self
    where
        S: SemaphoreBackend,
        E: ElectionBackend,
        R: RwLockBackend,
    {
        let (semaphore, election, rwlock) = (
            semaphore(backend.clone()),
            election(backend.clone()),
            rwlock(backend.clone()),
        );
        BackendLock::shared(backend)
            .with_semaphore(semaphore)
            .with_election(election)
            .with_rwlock(rwlock)
    }

    /// Offers `semaphore` as [`DistributedLock::semaphore`], with this lock's
    /// defaults.
    pub fn with_semaphore(mut self, semaphore: impl SemaphoreBackend) -> Self {
        let mut semaphore = BackendSemaphore::new(semaphore);
        semaphore.0.defaults = self.defaults.clone();
        self.semaphore = Some(Arc::new(semaphore));
        self
    }

    /// Offers `election` as [`DistributedLock::election`], with this lock's
    /// defaults.
    pub fn with_election(mut self, election: impl ElectionBackend) -> Self {
        let mut election = BackendElection::new(election);
        election.0.defaults = self.defaults.clone();
        self.election = Some(Arc::new(election));
        self
    }

    /// Offers `rwlock` as [`DistributedLock::rwlock`], with this lock's
    /// defaults.
    pub fn with_rwlock(mut self, rwlock: impl RwLockBackend) -> Self {
        let mut rwlock = BackendRwLock::new(rwlock);
        rwlock.0.defaults = self.defaults.clone();
        self.rwlock = Some(Arc::new(rwlock));
        self
    }

    /// Offers elections on this backend's locks ([`LockElection`]): for
    /// backends without a native election layout.
    pub fn with_lock_election(self) -> Self {
        let election = LockElection::new(self.backend.clone());
        self.with_election(election)
    }

    /// Sets the defaults of every acquire option a caller leaves unset, on
    /// this lock and the primitives it offers ([`DistributedLock::default_options`]),
    /// refusing options this backend cannot honour (a ttl below its minimum,
    /// say) now rather than at the first acquire.
    pub fn with_defaults(self, defaults: AcquireOptions) -> Result<Self, LockError> {
        defaults.validate(&self.backend.capabilities())?;
        self.defaults.set(defaults);
        Ok(self)
    }

    /// The adapter, for backend-specific calls.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// This client's counters so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Another handle on a lease this client already holds for `owner`, if any.
    fn reenter(&self, key: &LockKey, owner: &Owner) -> Option<Lease> {
        let shared = self.reentrant.enter(key, owner, Shared::is_held)?;
        self.metrics.reentered();
        Some(Lease::reentered(shared))
    }

    /// The `Busy` error for `key`, naming its holder when the server has it
    /// recorded: one read, on the failure path only.
    async fn busy(&self, key: LockKey) -> LockError {
        let holder = match self.backend.inspect() {
            Some(inspect) => inspect.holder(&key).await.ok().flatten(),
            None => None,
        };
        LockError::Busy {
            key,
            holder: holder.and_then(|h| h.meta),
        }
    }

    /// `acquire`, where a `Busy` names the holder when `name_holder`.
    async fn attempt(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
        name_holder: bool,
    ) -> Result<Lease, LockError> {
        let opts = &self.defaults.fill(opts);
        opts.validate(&self.backend.capabilities())?;
        if let Some(lease) = opts.get_owner().and_then(|owner| self.reenter(key, owner)) {
            return Ok(lease);
        }
        // `outcome` and `token` are known only at the end; `Attempt` records them.
        let span = tracing::debug_span!(
            "distlock.acquire",
            backend = self.backend.name(),
            key = %key,
            outcome = tracing::field::Empty,
            token = tracing::field::Empty,
        );
        let started = Instant::now();
        let acquire = std::pin::pin!(self.acquire_from_backend(key, opts, started, name_holder));
        Attempt::start(&self.metrics, span, started)
            .run(acquire)
            .await
    }

    async fn acquire_from_backend(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
        started: Instant,
        name_holder: bool,
    ) -> Result<Lease, LockError> {
        let meta = HolderMeta::this_process().labelled(opts.get_label());
        let request = AcquireRequest {
            key,
            ttl: opts.grant_ttl(),
            wait: WaitUntil::from_wait(opts.get_wait(), started),
            started,
            meta: &meta,
        };
        let acquired = match self.backend.acquire(request).await {
            Err(LockError::Busy { key, holder: None }) if name_holder => {
                return Err(self.busy(key).await);
            }
            other => other?,
        };
        let won = Won {
            holding: Arc::new(Bound {
                backend: self.backend.clone(),
                handle: acquired.handle,
            }),
            token: acquired.token,
            sent_at: acquired.sent_at,
        };
        start::begin(
            key,
            won,
            opts,
            started,
            &self.metrics,
            Some(&self.reentrant),
        )
    }
}

#[async_trait]
impl<B: Backend> DistributedLock for BackendLock<B> {
    async fn acquire(&self, key: &LockKey, opts: &AcquireOptions) -> Result<Lease, LockError> {
        self.attempt(key, opts, true).await
    }

    /// A miss is expected here, so its `Busy` is not read further.
    async fn try_acquire(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<Option<Lease>, LockError> {
        match self.attempt(key, &opts.clone().wait(Wait::No), false).await {
            Ok(lease) => Ok(Some(lease)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn default_options(&self) -> AcquireOptions {
        self.defaults.get()
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn metrics(&self) -> Option<MetricsSnapshot> {
        Some(self.metrics.snapshot())
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        self.backend.inspect()
    }

    fn semaphore(&self) -> Option<DynSemaphore> {
        self.semaphore.clone()
    }

    fn election(&self) -> Option<DynElection> {
        self.election.clone()
    }

    fn rwlock(&self) -> Option<DynRwLock> {
        self.rwlock.clone()
    }
}
