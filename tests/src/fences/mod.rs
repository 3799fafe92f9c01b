//! The stores the fence suite runs against: memory always, Redis, MySQL and
//! PostgreSQL
//! behind their features; and the paused-holder cross product over every lock
//! backend.

mod memory;
pub mod paused;
pub mod servers;

use distlock_core::{BoxError, Fence, LockError};
use distlock_testkit::fences::{FenceHarness, FenceSpec};
use servers::{Endpoint, Servers};
use std::sync::Arc;

/// The stores behind a server: name, where, and an address nobody answers at.
pub const REMOTE_STORES: [(bool, &str, Endpoint, &str); 3] = [
    (
        cfg!(feature = "redis"),
        "redis",
        Endpoint::Redis,
        "redis://127.0.0.1:1",
    ),
    (
        cfg!(feature = "mysql"),
        "mysql",
        Endpoint::MySql("version_cas"),
        "mysql://root:secret@127.0.0.1:1/distlock",
    ),
    (
        cfg!(feature = "postgres"),
        "postgres",
        Endpoint::Postgres("version_cas"),
        "postgres://distlock:secret@127.0.0.1:1/distlock",
    ),
];

/// Every enabled store.
pub fn specs(servers: &Arc<Servers>) -> Vec<FenceSpec> {
    let remote_stores = REMOTE_STORES
        .into_iter()
        .filter(|(enabled, ..)| *enabled)
        .map(|(_, name, at, dead_url)| remote(name, at, dead_url, servers));
    std::iter::once(memory::spec())
        .chain(remote_stores)
        .collect()
}

/// A store reached through `distlock::connect_fence` at a launched server; its
/// unreachable twin is `dead_url`, a port nobody listens on.
fn remote(
    name: &'static str,
    at: Endpoint,
    dead_url: &'static str,
    servers: &Arc<Servers>,
) -> FenceSpec {
    let servers = servers.clone();
    FenceSpec {
        name: name.into(),
        remote: true,
        start: Box::new(move || {
            let servers = servers.clone();
            Box::pin(async move {
                let url = servers.url(at).await?;
                Ok(Arc::new(ConnectedStore { url, dead_url }) as Arc<dyn FenceHarness>)
            })
        }),
    }
}

/// A store at a URL; each `fence()` is a new client, as separate writers are.
#[derive(Debug)]
struct ConnectedStore {
    url: String,
    dead_url: &'static str,
}

#[async_trait::async_trait]
impl FenceHarness for ConnectedStore {
    async fn fence(&self) -> Result<Arc<dyn Fence>, BoxError> {
        Ok(distlock::connect_fence(&self.url).await?)
    }

    async fn unreachable(&self) -> Result<Arc<dyn Fence>, LockError> {
        distlock::connect_fence(self.dead_url).await
    }
}
