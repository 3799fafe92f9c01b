//! The in-process store: one `MemoryFence` shared by every writer.

use distlock_core::{BoxError, Fence, LockError, MemoryFence};
use distlock_testkit::fences::{FenceHarness, FenceSpec};
use std::sync::Arc;

pub fn spec() -> FenceSpec {
    FenceSpec {
        name: "memory".into(),
        remote: false,
        start: Box::new(|| {
            Box::pin(async {
                Ok(Arc::new(MemoryStore(Arc::new(MemoryFence::new()))) as Arc<dyn FenceHarness>)
            })
        }),
    }
}

#[derive(Debug)]
struct MemoryStore(Arc<MemoryFence>);

#[async_trait::async_trait]
impl FenceHarness for MemoryStore {
    async fn fence(&self) -> Result<Arc<dyn Fence>, BoxError> {
        Ok(self.0.clone())
    }

    async fn unreachable(&self) -> Result<Arc<dyn Fence>, LockError> {
        Err(LockError::config(
            "memory",
            "an in-process store cannot be unreachable",
        ))
    }
}
