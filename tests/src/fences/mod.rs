//! The stores the fence suite runs against: memory always, and every
//! registered backend that stores fenced data (Redis, MySQL, PostgreSQL)
//! behind its feature; and the paused-holder cross product over every lock
//! backend.

mod memory;
pub mod paused;
pub mod servers;

use distlock_core::{BoxError, Fence, LockError};
use distlock_testkit::fences::{FenceHarness, FenceSpec};
use servers::{Endpoint, Servers};
use std::sync::Arc;

/// The stores behind a server: each backend the facade registers as a fenced
/// store, at the URL of its first paused-holder lock.
pub fn remote_stores() -> Vec<(&'static str, Endpoint)> {
    let is_store = |name| {
        distlock::BackendKind::all()
            .find(|kind| kind.name() == name)
            .and_then(|kind| kind.registration())
            .is_some_and(|registration| registration.has_fence())
    };
    paused::locks()
        .into_iter()
        .filter(|(name, at)| *name == at.backend && is_store(at.backend))
        .collect()
}

/// Every enabled store.
pub fn specs(servers: &Arc<Servers>) -> Vec<FenceSpec> {
    let remote_stores = remote_stores()
        .into_iter()
        .map(|(name, at)| remote(name, at, servers));
    std::iter::once(memory::spec())
        .chain(remote_stores)
        .collect()
}

/// A store reached through `distlock::connect_fence` at a launched server; its
/// unreachable twin is the same URL at a port nobody listens on.
fn remote(name: &'static str, at: Endpoint, servers: &Arc<Servers>) -> FenceSpec {
    let servers = servers.clone();
    FenceSpec {
        name: name.into(),
        remote: true,
        start: Box::new(move || {
            let servers = servers.clone();
            Box::pin(async move {
                let url = servers.url(at).await?;
                let dead_url = servers::unreachable_twin(&url)?;
                Ok(Arc::new(ConnectedStore { url, dead_url }) as Arc<dyn FenceHarness>)
            })
        }),
    }
}

/// A store at a URL; each `fence()` is a new client, as separate writers are.
#[derive(Debug)]
struct ConnectedStore {
    url: String,
    dead_url: String,
}

#[async_trait::async_trait]
impl FenceHarness for ConnectedStore {
    async fn fence(&self) -> Result<Arc<dyn Fence>, BoxError> {
        Ok(distlock::connect_fence(&self.url).await?)
    }

    async fn unreachable(&self) -> Result<Arc<dyn Fence>, LockError> {
        distlock::connect_fence(&self.dead_url).await
    }
}
