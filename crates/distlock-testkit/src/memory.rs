//! The harness for the in-memory backend. It offers every fault hook, so the
//! whole suite runs on it.

use crate::fault::{Fault, FaultControl};
use crate::harness::{FaultyClient, Harness, Hooks};
use async_trait::async_trait;
use distlock_core::memory::{MemoryFault, MemoryLock, MemoryStore};
use distlock_core::{BoxError, Capabilities, DistributedLock, DynLock};
use std::sync::Arc;

/// Runs the suite against a [`MemoryStore`].
#[derive(Debug)]
pub struct MemoryHarness {
    store: MemoryStore,
    inspector: DynLock,
}

impl Default for MemoryHarness {
    fn default() -> Self {
        let store = MemoryStore::new();
        let inspector = Arc::new(store.client());
        MemoryHarness { store, inspector }
    }
}

impl MemoryHarness {
    /// A harness over a fresh store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hooks this harness offers: all but a holder process (its locks
    /// live in this process).
    pub const HOOKS: Hooks = Hooks {
        delete_lock: true,
        faulty_client: true,
        restart: true,
        residue: true,
        holder_process: false,
    };

    /// The memory backend's capabilities.
    pub fn capabilities() -> Capabilities {
        MemoryStore::new().client().capabilities()
    }
}

/// Maps network faults onto the memory client's simulated network.
struct MemoryFaults(Arc<MemoryLock>);

#[async_trait]
impl FaultControl for MemoryFaults {
    async fn set_fault(&self, fault: Fault) {
        self.0.backend().set_fault(match fault {
            Fault::Delay(d) => MemoryFault::Delay(d),
            Fault::Blackhole => MemoryFault::Unreachable,
            Fault::Reset | Fault::Close => MemoryFault::Refused,
            _ => MemoryFault::None,
        });
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    fn name(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Self::capabilities()
    }

    fn hooks(&self) -> Hooks {
        Self::HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(self.store.client()))
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let lock = Arc::new(self.store.client());
        Ok(FaultyClient {
            lock: lock.clone(),
            faults: Arc::new(MemoryFaults(lock)),
        })
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(MemoryHarness::new()))
    }

    async fn restart_server(&self) -> Result<(), BoxError> {
        self.store.restart();
        Ok(())
    }
}
