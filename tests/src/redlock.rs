//! Redlock: five independent `redis-server`s started by the testkit, or the
//! comma-separated URLs in `DISTLOCK_TEST_REDLOCK_URL`.
//!
//! Deletion and residue go through the adapter's own `Inspect`, which asks every
//! node (a lock counts once however many nodes hold its key); a faulty client has
//! a fault proxy in front of every node, and one control applies a fault to all
//! of them.

use crate::redis::{HOOKS, NAMESPACE, launch_servers, server_addr, via};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::{RedlockBackend, RedlockConfig};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{
    Launched, MovableClock, RedisOptions, RedisServer, ServerError, external_url,
};
use std::sync::Arc;
use std::time::Duration;

/// How many nodes the suite runs Redlock on.
pub const NODES: usize = 5;

/// The Redlock backend's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "redlock".into(),
        capabilities: RedlockBackend::CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(RedlockHarness::start().await?) as _) })),
    }
}

/// One fault applied to the proxies in front of every node.
struct AllNodes(Vec<FaultProxy>);

#[async_trait]
impl FaultControl for AllNodes {
    async fn set_fault(&self, fault: Fault) {
        for proxy in &self.0 {
            proxy.set_fault(fault).await;
        }
    }
}

/// The harness: the nodes (launched or external) and the inspecting client.
#[derive(Debug)]
pub struct RedlockHarness {
    servers: Vec<RedisServer>,
    urls: Vec<String>,
    /// The `state_ttl` of every client it hands out, if not the default.
    state_ttl: Option<Duration>,
    inspector: DynLock,
}

impl RedlockHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("redlock") {
            Some(urls) => {
                let urls = urls.split(',').map(|u| u.trim().to_owned()).collect();
                Self::with(Vec::new(), urls).await
            }
            None => Self::launch().await,
        }
    }

    /// A harness on nodes of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let servers = launch_servers(NODES).await?;
        let urls = servers.iter().map(RedisServer::url).collect();
        Self::with(servers, urls).await
    }

    /// A harness on `nodes` nodes of its own, each with a wall clock the test
    /// can move (`redlock::clock_jump`).
    pub async fn launch_with_clocks(nodes: usize) -> Result<Self, BoxError> {
        let runtime = tokio::runtime::Handle::current();
        // Not `Send` (the launcher's retry helper), as in `launch_servers`.
        let servers = tokio::task::spawn_blocking(move || {
            runtime.block_on(async {
                let mut servers = Vec::with_capacity(nodes);
                for _ in 0..nodes {
                    let options = RedisOptions {
                        clock: Some(MovableClock::new()?),
                        ..RedisOptions::default()
                    };
                    servers.push(RedisServer::start_with(options).await?);
                }
                Ok::<_, ServerError>(servers)
            })
        })
        .await??;
        let urls = servers.iter().map(RedisServer::url).collect();
        Self::with(servers, urls).await
    }

    /// This harness, its clients (the faulty ones too) all collecting names
    /// idle for `state_ttl` (`redlock::clock_step_back`).
    pub fn with_state_ttl(self, state_ttl: Duration) -> Self {
        RedlockHarness {
            state_ttl: Some(state_ttl),
            ..self
        }
    }

    async fn with(servers: Vec<RedisServer>, urls: Vec<String>) -> Result<Self, BoxError> {
        let inspector = Self::connect(&urls, None).await?;
        Ok(RedlockHarness {
            servers,
            urls,
            state_ttl: None,
            inspector,
        })
    }

    async fn connect(urls: &[String], state_ttl: Option<Duration>) -> Result<DynLock, BoxError> {
        let config = RedlockConfig::from_urls(urls)?.namespace(NAMESPACE);
        let config = match state_ttl {
            Some(state_ttl) => config.state_ttl(state_ttl),
            None => config,
        };
        Ok(Arc::new(config.connect().await?))
    }
}

#[async_trait]
impl Harness for RedlockHarness {
    fn name(&self) -> &str {
        "redlock"
    }

    fn capabilities(&self) -> Capabilities {
        RedlockBackend::CAPABILITIES
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Self::connect(&self.urls, self.state_ttl).await
    }

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        Self::connect(&self.urls, Some(state_ttl)).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let (mut proxies, mut urls) = (Vec::new(), Vec::new());
        for url in &self.urls {
            let proxy = FaultProxy::start(server_addr(url).await?).await?;
            urls.push(via(url, proxy.addr())?);
            proxies.push(proxy);
        }
        Ok(FaultyClient {
            lock: Self::connect(&urls, self.state_ttl).await?,
            faults: Arc::new(AllNodes(proxies)),
        })
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    async fn restart_server(&self) -> Result<(), BoxError> {
        if self.servers.is_empty() {
            return Err("cannot restart external servers".into());
        }
        for server in &self.servers {
            server.restart().await?;
        }
        Ok(())
    }

    fn launched_all(&self) -> Vec<&dyn Launched> {
        self.servers.iter().map(|s| s as &dyn Launched).collect()
    }

    fn lock_url(&self) -> Option<String> {
        // Launched nodes only: external ones may need credentials per node.
        let hosts: Vec<String> = self.servers.iter().map(|s| s.addr().to_string()).collect();
        (!hosts.is_empty()).then(|| format!("redlock://{}?namespace={NAMESPACE}", hosts.join(",")))
    }

    fn server_logs(&self) -> String {
        let tails: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("[node :{}]\n{}", s.port(), s.log_tail(15)))
            .collect();
        if tails.is_empty() {
            "(external servers)".into()
        } else {
            tails.join("\n")
        }
    }
}

/// Three Redis nodes for the fence target's Redlock.
pub async fn launch_url() -> Result<crate::Running, BoxError> {
    let nodes = launch_servers(3).await?;
    let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    Ok(crate::Running::new(
        format!("redlock://{}", hosts.join(",")),
        nodes,
    ))
}
