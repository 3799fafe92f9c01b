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

use crate::election::{BackendElection, LockElection};
use crate::lock::BackendLock;
use crate::rwlock::BackendRwLock;
use crate::semaphore::BackendSemaphore;
use crate::{LockError, LockKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, watch};

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
        let semaphore = BackendSemaphore::new(MemorySemaphoreBackend::new(network.clone()));
        let rwlock = BackendRwLock::new(MemoryRwLockBackend::new(network.clone()));
        BackendLock::shared(network)
            .with_semaphore(Arc::new(semaphore))
            .with_rwlock(Arc::new(rwlock))
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
            sem.revoke_all();
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
}
