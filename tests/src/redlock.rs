//! Redlock: five independent `redis-server`s started by the testkit, or the
//! comma-separated URLs in `DISTLOCK_TEST_REDLOCK_URL`.
//!
//! Deletion and residue act on every node (a lock counts once however many nodes
//! hold its key); a faulty client has a fault proxy in front of every node, and
//! one control applies a fault to all of them.

use crate::redis::{Admin, HOOKS, NAMESPACE, launch_servers, server_addr, via};
use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock, LockKey};
use distlock_redis::{RedlockBackend, RedlockConfig};
use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{RedisServer, external_url};
use std::collections::HashSet;
use std::sync::Arc;

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

/// The harness: the nodes (launched or external) and an admin connection to each.
#[derive(Debug)]
pub struct RedlockHarness {
    servers: Vec<RedisServer>,
    urls: Vec<String>,
    admins: Vec<Admin>,
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

    async fn launch() -> Result<Self, BoxError> {
        let servers = launch_servers(NODES).await?;
        let urls = servers.iter().map(RedisServer::url).collect();
        Self::with(servers, urls).await
    }

    async fn with(servers: Vec<RedisServer>, urls: Vec<String>) -> Result<Self, BoxError> {
        let mut admins = Vec::new();
        for url in &urls {
            admins.push(Admin::connect(url).await?);
        }
        Ok(RedlockHarness {
            servers,
            urls,
            admins,
        })
    }

    async fn connect(urls: &[String]) -> Result<DynLock, BoxError> {
        Ok(Arc::new(
            RedlockConfig::from_urls(urls)?
                .namespace(NAMESPACE)
                .connect()
                .await?,
        ))
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
        Self::connect(&self.urls).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let (mut proxies, mut urls) = (Vec::new(), Vec::new());
        for url in &self.urls {
            let proxy = FaultProxy::start(server_addr(url).await?).await?;
            urls.push(via(url, proxy.addr())?);
            proxies.push(proxy);
        }
        Ok(FaultyClient {
            lock: Self::connect(&urls).await?,
            faults: Arc::new(AllNodes(proxies)),
        })
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        for admin in &self.admins {
            admin.delete_lock(key).await?;
        }
        Ok(())
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

    async fn residue(&self, prefix: &str) -> Result<usize, BoxError> {
        let mut locks = HashSet::new();
        for admin in &self.admins {
            locks.extend(admin.lock_keys(prefix).await?);
        }
        Ok(locks.len())
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
