//! Leader election: campaign for a name, lead while the [`Leadership`] is held,
//! release it to step down. The term is the fencing token, so a deposed leader's late writes are
//! refused by a [`crate::Fence`]. Backends with a native layout (etcd's
//! election prefix, Curator's `LeaderLatch`) implement [`ElectionBackend`]
//! themselves so other ecosystems interoperate; every other backend elects with
//! its lock through [`LockElection`].

use crate::backend::{AcquireRequest, Acquired, Backend, DynLeaderChanges, Holding, WaitUntil};
use crate::inspect::Holder;
use crate::lease::Bound;
use crate::observe::{LeaderSource, LeaderUpdate, LeaderWatch};
use crate::permit::Leadership;
use crate::start::{self, Won};
use crate::wrapped::Wrapped;
use crate::{AcquireOptions, Capabilities, HolderMeta, LockError, LockKey};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;

/// An election client. Every adapter that offers elections implements it
/// (see [`Capabilities::primitives`]).
///
/// `campaign` is cancel-safe: dropping it withdraws the candidacy.
///
/// ```
/// use distlock_core::prelude::*;
/// use distlock_core::{AcquireOptions, LockKey, memory::MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let election = MemoryStore::new().election_client();
/// let name = LockKey::new("billing/scheduler")?;
/// let leadership = election.campaign(&name, "node-a", &AcquireOptions::new()).await?;
/// println!("leading in term {}", leadership.token());
/// leadership.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LeaderElection: Send + Sync + std::fmt::Debug {
    /// Campaigns for `name` with `proposal` (this candidate's identity, shown to
    /// observers), waiting per `opts.wait` to become leader. A wait that ends
    /// first gives `Timeout` (`Busy` for `Wait::No`).
    async fn campaign(
        &self,
        name: &LockKey,
        proposal: &str,
        opts: &AcquireOptions,
    ) -> Result<Leadership, LockError>;

    /// Who leads `name` now: `owner` is the leader's proposal where the backend
    /// stores it (etcd, ZooKeeper), the lock owner value otherwise; `token` its
    /// term.
    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError>;

    /// Watches who leads `name` without campaigning: the leader as
    /// [`LeaderElection::leader`] shows it (or `None`), first as it is now,
    /// then at each change (see [`LeaderWatch`] for latency, errors and
    /// what a drop ends).
    fn observe(&self, name: &LockKey) -> LeaderWatch;

    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// A short backend name, such as `etcd`.
    fn name(&self) -> &'static str;
}

/// A shareable election client of any backend.
pub type DynElection = Arc<dyn LeaderElection>;

/// The longest proposal, in bytes.
pub const MAX_PROPOSAL_LEN: usize = 1024;

/// One campaign as the adapter sees it.
#[derive(Debug, Clone, Copy)]
pub struct CampaignRequest<'a> {
    /// The name, ttl and wait, as for a lock.
    pub acquire: AcquireRequest<'a>,
    /// The candidate's identity (validated: 1 to [`MAX_PROPOSAL_LEN`] bytes, no
    /// control characters).
    pub proposal: &'a str,
}

/// What an election adapter implements. Renewal, resignation and loss go
/// through the leadership's [`Holding`]; core does the rest.
#[async_trait]
pub trait ElectionBackend: Send + Sync + 'static {
    /// A held leadership: renews and resigns itself.
    type Leadership: Holding;

    /// A short backend name.
    fn name(&self) -> &'static str;

    /// What the backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// Campaigns, waiting per `req.acquire.wait`; gives
    /// `req.acquire.not_acquired()` when the wait ends. The token of the result
    /// is the term. Must be cancel-safe.
    async fn campaign(
        &self,
        req: CampaignRequest<'_>,
    ) -> Result<Acquired<Self::Leadership>, LockError>;

    /// The current leader of `name`, if any.
    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError>;

    /// A push of the server's whenever the leader of `name` may have
    /// changed, subscribed now; `None` (the default) makes observers poll
    /// [`ElectionBackend::leader`].
    async fn leader_changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError> {
        let _ = name;
        Ok(None)
    }
}

#[async_trait]
impl<E: ElectionBackend> LeaderSource for E {
    async fn leader(&self, name: &LockKey) -> LeaderUpdate {
        ElectionBackend::leader(self, name).await
    }

    async fn changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError> {
        self.leader_changes(name).await
    }
}

/// Any [`ElectionBackend`] as a [`LeaderElection`].
pub struct BackendElection<E: ElectionBackend>(pub(crate) Wrapped<E>);

impl<E: ElectionBackend> std::fmt::Debug for BackendElection<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug(f, "BackendElection", self.0.backend.name())
    }
}

impl<E: ElectionBackend> BackendElection<E> {
    /// Wraps a connected adapter.
    pub fn new(backend: E) -> Self {
        let name = backend.name();
        BackendElection(Wrapped::new(backend, name))
    }

    /// The adapter, for backend-specific calls.
    pub fn backend(&self) -> &E {
        &self.0.backend
    }
}

fn validate_proposal(proposal: &str) -> Result<(), LockError> {
    if proposal.is_empty()
        || proposal.len() > MAX_PROPOSAL_LEN
        || proposal.chars().any(char::is_control)
    {
        return Err(LockError::invalid_options(format!(
            "a proposal must be 1 to {MAX_PROPOSAL_LEN} bytes without control characters (got {} bytes)",
            proposal.len()
        )));
    }
    Ok(())
}

#[async_trait]
impl<E: ElectionBackend> LeaderElection for BackendElection<E> {
    async fn campaign(
        &self,
        name: &LockKey,
        proposal: &str,
        opts: &AcquireOptions,
    ) -> Result<Leadership, LockError> {
        let opts = &self.0.defaults.fill(opts);
        opts.validate(&self.0.backend.capabilities())?;
        validate_proposal(proposal)?;
        if opts.get_owner().is_some() {
            return Err(LockError::invalid_options(
                "a campaign is not reentrant; drop the owner (the proposal identifies the candidate)",
            ));
        }
        let started = Instant::now();
        let meta = HolderMeta::this_process().labelled(opts.get_label());
        let req = CampaignRequest {
            acquire: AcquireRequest {
                key: name,
                ttl: opts.grant_ttl(),
                wait: WaitUntil::from_wait(opts.get_wait(), started),
                started,
                meta: &meta,
            },
            proposal,
        };
        let won = self.0.backend.campaign(req).await?;
        let won = Won {
            holding: Arc::new(won.handle),
            token: won.token,
            sent_at: won.sent_at,
        };
        let lease = start::begin(name, won, opts, started, &self.0.metrics, None)?;
        tracing::debug!(backend = self.0.backend.name(), key = %name, term = %lease.token(), "leading");
        Ok(Leadership::new(lease))
    }

    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError> {
        self.0.backend.leader(name).await
    }

    fn observe(&self, name: &LockKey) -> LeaderWatch {
        LeaderWatch::new(self.0.backend.clone(), name)
    }

    fn capabilities(&self) -> Capabilities {
        self.0.backend.capabilities()
    }

    fn name(&self) -> &'static str {
        self.0.backend.name()
    }
}

/// Election on a lock backend without a native election layout: the leader is
/// the holder of the lock of the same name, and the term is its fencing token.
/// (So on these backends `elect --key x` and `run --key x` exclude each other.)
/// The proposal is not stored; [`LeaderElection::leader`] shows the lock's
/// owner value.
pub struct LockElection<B: Backend> {
    lock: Arc<B>,
}

impl<B: Backend> std::fmt::Debug for LockElection<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockElection")
            .field("lock", &self.lock.name())
            .finish()
    }
}

impl<B: Backend> LockElection<B> {
    /// Elects with `lock`'s locks.
    pub fn new(lock: Arc<B>) -> Self {
        LockElection { lock }
    }

    /// The lock adapter.
    pub fn lock(&self) -> &B {
        &self.lock
    }
}

#[async_trait]
impl<B: Backend> ElectionBackend for LockElection<B> {
    type Leadership = Bound<B>;

    fn name(&self) -> &'static str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn campaign(&self, req: CampaignRequest<'_>) -> Result<Acquired<Bound<B>>, LockError> {
        let acquired = self.lock.acquire(req.acquire).await?;
        Ok(Bound::acquired(&self.lock, acquired))
    }

    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError> {
        let inspect = self.lock.inspect().ok_or_else(|| {
            LockError::backend(
                self.lock.name(),
                "this backend cannot inspect its locks, so the leader is unknown",
            )
        })?;
        inspect.holder(name).await
    }

    async fn leader_changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError> {
        self.lock.holder_changes(name).await
    }
}
