//! The in-memory backend: no server, every fault hook.

use distlock_testkit::memory::MemoryHarness;
use distlock_testkit::runner::BackendSpec;
use std::sync::Arc;

/// The memory backend's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "memory".into(),
        capabilities: MemoryHarness::capabilities(),
        hooks: MemoryHarness::HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(MemoryHarness::new()) as _) })),
    }
}
