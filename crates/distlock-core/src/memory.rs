//! An in-process backend with real TTLs, fencing tokens, FIFO wake-up and loss.
//!
//! Use it in your application's unit tests and demos: it passes the whole
//! conformance suite. A [`MemoryStore`] plays the server; each
//! [`MemoryStore::client`] is an independent client of it, with its own
//! reentrancy scope and its own injectable faults.
//!
//! ```
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey, memory::MemoryStore};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let store = MemoryStore::new();
//! let (a, b) = (store.client(), store.client());
//! let key = LockKey::new("job")?;
//! let lease = a.acquire(&key, &AcquireOptions::new()).await?;
//! assert!(b.try_acquire(&key, &AcquireOptions::new()).await?.is_none());
//! lease.release().await?;
//! assert!(b.try_acquire(&key, &AcquireOptions::new()).await?.is_some());
//! # Ok(()) }
//! ```

use crate::backend::{AcquireRequest, LossSignal, WaitUntil};
use crate::election::{BackendElection, LockElection};
use crate::lock::BackendLock;
use crate::rwlock::BackendRwLock;
use crate::semaphore::BackendSemaphore;
use crate::toolkit::CancelGuard;
use crate::{LockError, LockKey, LossReason};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, watch};

mod holders;
mod lock;
mod rwlock;
mod semaphore;

pub use lock::MemoryHandle;
pub use rwlock::{MemoryRwLockBackend, ShareHandle};
pub use semaphore::{MemorySemaphoreBackend, PermitHandle};

/// A lock client of a [`MemoryStore`].
pub type MemoryLock = BackendLock<MemoryBackend>;

/// A semaphore client of a [`MemoryStore`].
pub type MemorySemaphore = BackendSemaphore<MemorySemaphoreBackend>;

/// A read-write lock client of a [`MemoryStore`].
pub type MemoryRwLock = BackendRwLock<MemoryRwLockBackend>;

/// An election client of a [`MemoryStore`]: elections on its locks.
pub type MemoryElection = BackendElection<LockElection<MemoryBackend>>;

/// The shared "server" of the memory backend. Cloning it gives another handle on
/// the same store.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    /// Bumped whenever a lock gets or loses its holder, for observers of an
    /// election (its wake-up, as a server's push).
    changes: Arc<watch::Sender<u64>>,
}

#[derive(Debug, Default)]
struct State {
    keys: HashMap<LockKey, lock::KeyState>,
    /// Fence counters. Like a server's counter keys they outlive the locks.
    counters: HashMap<LockKey, u64>,
    /// Semaphores, a namespace apart from the locks.
    semaphores: HashMap<LockKey, semaphore::SemState>,
    /// Read-write locks, a namespace apart from the locks.
    rwlocks: HashMap<LockKey, rwlock::RwState>,
    next_id: u64,
}

#[derive(Debug)]
struct Queued {
    id: u64,
    wake: Arc<Notify>,
}

/// One try of a waiter at what it queues for.
enum Attempt<T> {
    /// Won: what the store granted.
    Taken(T),
    /// Not now. `wake_at` is the earliest expiry in the way when the waiter is
    /// first in line.
    Blocked { wake_at: Option<Instant> },
}

/// The loss signal of a holder the store revokes through `revoked`.
fn revoked_signal(revoked: &Arc<Notify>) -> LossSignal {
    let revoked = revoked.clone();
    Box::pin(async move {
        revoked.notified().await;
        LossReason::Revoked
    })
}

/// Seeds a fresh counter from the wall clock in microseconds, so tokens keep
/// rising across [`MemoryStore::restart`] (as the Redis adapter does with `TIME`).
fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new independent client of this store. Its
    /// [`DistributedLock::semaphore`](crate::DistributedLock::semaphore),
    /// [`DistributedLock::election`](crate::DistributedLock::election) and
    /// [`DistributedLock::rwlock`](crate::DistributedLock::rwlock) share its
    /// simulated network, so faults injected into it hit them too.
    pub fn client(&self) -> MemoryLock {
        let network = Arc::new(self.backend());
        let semaphore = MemorySemaphoreBackend::new(network.clone());
        let rwlock = MemoryRwLockBackend::new(network.clone());
        BackendLock::shared(network)
            .with_semaphore(semaphore)
            .with_rwlock(rwlock)
            .with_lock_election()
    }

    /// A new independent semaphore client of this store.
    pub fn semaphore_client(&self) -> MemorySemaphore {
        BackendSemaphore::new(MemorySemaphoreBackend::new(Arc::new(self.backend())))
    }

    /// A new independent read-write lock client of this store.
    pub fn rwlock_client(&self) -> MemoryRwLock {
        BackendRwLock::new(MemoryRwLockBackend::new(Arc::new(self.backend())))
    }

    /// A new independent election client of this store (elections on its
    /// locks: the leader of `x` holds the lock `x`).
    pub fn election_client(&self) -> MemoryElection {
        BackendElection::new(LockElection::new(Arc::new(self.backend())))
    }

    /// A new client's adapter, to wrap in your own
    /// [`Backend`](crate::adapter::Backend) (for example to inject misbehaviour in
    /// tests).
    pub fn backend(&self) -> MemoryBackend {
        MemoryBackend {
            store: self.clone(),
            fault: watch::Sender::new(MemoryFault::None),
            request_timeout: Duration::from_secs(2),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Simulates a restart of a server without persistence: every lock and every
    /// counter is lost. Counters are re-seeded from the clock on next use.
    pub fn restart(&self) {
        let mut state = self.state();
        state.counters.clear();
        for sem in state.semaphores.values_mut() {
            sem.holders.revoke_all();
        }
        state.semaphores.clear();
        for rw in state.rwlocks.values_mut() {
            rw.revoke_all();
        }
        state.rwlocks.clear();
        for entry in state.keys.values_mut() {
            entry.remove_holder();
        }
        state.keys.retain(|_, entry| !entry.is_empty());
        self.changed();
    }

    /// Tells observers that a holder may have changed.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn next_id(&self) -> u64 {
        let mut state = self.state();
        state.next_id += 1;
        state.next_id
    }
}

/// A fault injected into one memory client's "network".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryFault {
    /// No fault.
    None,
    /// Requests are applied at once; their replies arrive this much later.
    Delay(Duration),
    /// Requests hang, as in a partition, until the request timeout.
    Unreachable,
    /// Requests fail at once, as with a refused connection.
    Refused,
}

/// The memory adapter. Reach it through [`BackendLock::backend`] to inject faults.
#[derive(Debug)]
pub struct MemoryBackend {
    store: MemoryStore,
    fault: watch::Sender<MemoryFault>,
    request_timeout: Duration,
}

impl MemoryBackend {
    /// Injects `fault` into this client's traffic from now on.
    pub fn set_fault(&self, fault: MemoryFault) {
        self.fault.send_replace(fault);
    }

    /// The store this client talks to.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The request "reaching the server": fails or hangs under a fault.
    async fn reach(&self) -> Result<(), LockError> {
        let unavailable = |why: &str| LockError::Unavailable {
            backend: "memory",
            endpoint: "memory://".into(),
            source: why.into(),
        };
        let mut fault = self.fault.subscribe();
        let passable = |f: &MemoryFault| !matches!(f, MemoryFault::Unreachable);
        let wait = tokio::time::timeout(self.request_timeout, fault.wait_for(passable));
        match wait.await {
            Ok(Ok(f)) if *f == MemoryFault::Refused => {
                Err(unavailable("connection refused (injected fault)"))
            }
            Ok(_) => Ok(()),
            Err(_) => Err(unavailable("request timed out (injected partition)")),
        }
    }

    async fn reply(&self) {
        let fault = *self.fault.borrow();
        if let MemoryFault::Delay(delay) = fault {
            tokio::time::sleep(delay).await;
        }
    }

    /// `step` on the store as one request: it reaches the server, then its
    /// reply comes back.
    async fn round_trip<R>(&self, step: impl FnOnce(&MemoryStore) -> R) -> Result<R, LockError> {
        self.reach().await?;
        let outcome = step(&self.store);
        self.reply().await;
        Ok(outcome)
    }

    /// The wait every memory primitive queues in: `attempt` (told whether to
    /// queue), then sleep until woken by a release, by the earliest expiry in
    /// the way when first in line, or by the deadline. A cancelled waiter
    /// `leave`s the queue, so nobody waits behind a ghost; a win whose reply is
    /// still in flight when the caller gives up is given back by `give_back`,
    /// so cancellation leaves nothing held. Gives the win and when its request
    /// was sent.
    async fn queue_for<T>(
        &self,
        req: &AcquireRequest<'_>,
        mut attempt: impl FnMut(&Queued, bool) -> Result<Attempt<T>, LockError>,
        leave: impl Fn(u64),
        give_back: impl Fn(T),
    ) -> Result<(T, Instant), LockError> {
        let no_wait = req.wait == WaitUntil::No;
        let me = Queued {
            id: self.store.next_id(),
            wake: Arc::new(Notify::new()),
        };
        let _in_queue = CancelGuard::new(me.id, |id| {
            leave(id);
            None
        });
        loop {
            let sent_at = Instant::now();
            tokio::select! {
                reached = self.reach() => reached?,
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
            }
            match attempt(&me, !no_wait)? {
                Attempt::Taken(won) => {
                    let in_flight = CancelGuard::new(won, |won| {
                        give_back(won);
                        None
                    });
                    self.reply().await;
                    let won = in_flight.disarm().ok_or_else(|| req.not_acquired())?;
                    return Ok((won, sent_at));
                }
                Attempt::Blocked { .. } if no_wait => {
                    self.reply().await;
                    return Err(req.not_acquired());
                }
                Attempt::Blocked { wake_at } => {
                    let expiry = async {
                        match wake_at {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = me.wake.notified() => {}
                        _ = expiry => {}
                        _ = req.wait.reached() => return Err(req.not_acquired()),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryStore;
    use crate::{LeaderElection, LockError, LockKey};

    /// An observer subscribes to the store's changes, and dropping its watch
    /// ends the subscription.
    #[tokio::test]
    async fn a_dropped_leader_watch_unsubscribes() -> Result<(), LockError> {
        let store = MemoryStore::new();
        let election = store.election_client();
        let mut watch = election.observe(&LockKey::new("observed")?);
        assert!(matches!(watch.next().await, Some(Ok(None))));
        assert_eq!(store.changes.receiver_count(), 1);
        drop(watch);
        assert_eq!(store.changes.receiver_count(), 0);
        Ok(())
    }
}
