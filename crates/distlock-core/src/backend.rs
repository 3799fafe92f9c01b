//! The small interface an adapter implements. Core builds everything else on top of
//! it once: validation, the local deadline, renewal, loss, release on drop,
//! reentrancy, tracing and metrics (see [`crate::adapter::BackendLock`]).

use crate::inspect::Inspect;
use crate::{Capabilities, FencingToken, HolderMeta, LockError, LockKey, LossReason, Wait};
use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// When an acquire attempt gives up: a [`Wait`] fixed to instants when the
/// caller started, with the same spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    /// One attempt only ([`Wait::No`]).
    No,
    /// Give up at this instant.
    Deadline(Instant),
    /// Never give up.
    Forever,
}

impl WaitUntil {
    /// Converts a [`Wait`] policy, measured from `now`.
    pub fn from_wait(wait: Wait, now: Instant) -> Self {
        match wait {
            Wait::No => WaitUntil::No,
            Wait::For(d) => now
                .checked_add(d)
                .map_or(WaitUntil::Forever, WaitUntil::Deadline),
            Wait::Forever => WaitUntil::Forever,
        }
    }

    /// The instant to give up at, if any. `No` gives `now`.
    pub fn instant(self) -> Option<Instant> {
        match self {
            WaitUntil::No => Some(Instant::now()),
            WaitUntil::Deadline(at) => Some(at),
            WaitUntil::Forever => None,
        }
    }

    /// Completes when the wait is over; never completes for `Forever`.
    pub async fn reached(self) {
        match self.instant() {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    }
}

/// One acquisition as the adapter sees it.
#[derive(Debug, Clone, Copy)]
pub struct AcquireRequest<'a> {
    /// The lock name.
    pub key: &'a LockKey,
    /// Server-side expiry.
    pub ttl: Duration,
    /// When to give up.
    pub wait: WaitUntil,
    /// When the caller started waiting.
    pub started: Instant,
    /// Who is acquiring, to store beside the lock where the layout has room.
    pub meta: &'a HolderMeta,
}

impl AcquireRequest<'_> {
    /// The error for a held lock under `WaitUntil::No`, or for a wait that ended.
    pub fn not_acquired(&self) -> LockError {
        match self.wait {
            WaitUntil::No => LockError::Busy {
                key: self.key.clone(),
                holder: None,
            },
            _ => LockError::Timeout {
                key: self.key.clone(),
                waited: self.started.elapsed(),
            },
        }
    }
}

/// What the adapter returns when it won the lock.
#[derive(Debug)]
pub struct Acquired<H> {
    /// Whatever the adapter needs to renew and release this lock.
    pub handle: H,
    /// The fencing token of this acquisition.
    pub token: FencingToken,
    /// When the request that won the lock was sent. The lease's validity is
    /// measured from here, never from the reply.
    pub sent_at: Instant,
}

/// The backend's answer to a renew or release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// We held the lock and the operation took effect.
    Held,
    /// The lock is gone or belongs to someone else; nothing was changed.
    NotHeld,
}

/// A future that completes when the backend learns the lock is gone.
pub type LossSignal = Pin<Box<dyn Future<Output = LossReason> + Send + 'static>>;

/// A server's push that the leader of one name may have changed: an etcd
/// watch, ZooKeeper child watches, a pub/sub channel, a `LISTEN`. An adapter
/// subscribes before the observer's first read, so no change falls between
/// a read and the wait after it.
#[async_trait]
pub trait LeaderChanges: Send + 'static {
    /// Completes at the next push since the previous call (or since the
    /// subscription). A spurious wake-up is harmless: the observer reads the
    /// leader again and yields only a change. An error ends this
    /// subscription; the observer yields it and subscribes again.
    async fn changed(&mut self) -> Result<(), LockError>;

    /// Whether a push also tells of a new leader where there was none.
    /// `false` (the default): it tells only of departures (a release, a
    /// deletion, an expiry), and observers of a vacant election poll.
    fn announces_arrivals(&self) -> bool {
        false
    }
}

/// A subscription to [`LeaderChanges`], or `None` for a backend that cannot
/// push (the observer polls).
pub type DynLeaderChanges = Option<Box<dyn LeaderChanges>>;

/// What an adapter implements. Keep it to the wire protocol: core does the rest.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// What the adapter keeps per held lock (owner value, key path, lease id...).
    type Handle: Send + Sync + 'static;

    /// A short backend name, such as `redis`.
    fn name(&self) -> &'static str;

    /// What the backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// Acquires `req.key`, waiting per `req.wait`; gives `req.not_acquired()` when
    /// the wait ends. Must be cancel-safe: if the future is dropped at any await,
    /// nothing may be left behind (spawn the cleanup when needed).
    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<Self::Handle>, LockError>;

    /// Extends the lock to `ttl` from now if the handle still owns it.
    async fn renew(&self, handle: &Self::Handle, ttl: Duration) -> Result<Ownership, LockError>;

    /// Frees the lock if, and only if, the handle still owns it.
    async fn release(&self, handle: &Self::Handle) -> Result<Ownership, LockError>;

    /// A push signal for loss (watch, session event), when the backend has one.
    fn loss_signal(&self, _handle: &Self::Handle) -> Option<LossSignal> {
        None
    }

    /// The lease of `handle` was abandoned (`Lease::abandon`): it will be
    /// neither renewed nor released, and must free at its ttl. A backend that
    /// shares a session between acquisitions (etcd's client lease) stops
    /// handing that session out now, or the next acquisition would keep the
    /// abandoned key alive.
    fn abandoned(&self, _handle: &Self::Handle) {}

    /// A push whenever the holder of `key` may have changed (a release, a
    /// new holder), subscribed now, for observers of an election on this
    /// lock; `None` (the default) makes them poll [`Inspect::holder`].
    async fn holder_changes(&self, key: &LockKey) -> Result<DynLeaderChanges, LockError> {
        let _ = key;
        Ok(None)
    }

    /// Server-side inspection of this backend's locks. Every adapter offers it;
    /// the default `None` is for backends with nothing to inspect.
    fn inspect(&self) -> Option<&dyn Inspect> {
        None
    }
}

/// One acquisition as core keeps it alive: whatever was acquired (a lock, a
/// semaphore permit, a leadership, a read or write share) reduced to renew,
/// release and an optional loss signal. Core's lease machinery (`Lease`: the
/// local deadline, the renewal watchdog, `lost()`, release on drop) runs over an
/// `Arc<dyn Holding>`, so every primitive shares it.
///
/// A lock [`Backend`] gets this for free (core pairs the backend with its
/// handle). Other primitives' adapters return a handle that implements it,
/// carrying what it needs to reach the server (a connection, a client).
#[async_trait]
pub trait Holding: Send + Sync + 'static {
    /// A short backend name, such as `redis`, for logs and metrics.
    fn backend_name(&self) -> &'static str;

    /// Extends the acquisition to `ttl` from now if it is still ours.
    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError>;

    /// Gives the acquisition back if, and only if, it is still ours.
    async fn release(&self) -> Result<Ownership, LockError>;

    /// A push signal for loss (watch, session event), when the backend has one.
    /// Called once, when the lease starts.
    fn loss_signal(&self) -> Option<LossSignal> {
        None
    }

    /// The lease was abandoned: see [`Backend::abandoned`].
    fn abandoned(&self) {}
}
