//! Redis, one node: a `redis-server` started by the testkit (no persistence, so a
//! restart empties it), or `DISTLOCK_TEST_REDIS_URL`.
//!
//! Every hook is offered: operator deletion with a raw `DEL`, residue by `SCAN`
//! over lock keys (fence counters excluded), faults through a TCP fault proxy per
//! faulty client, restarts on a dedicated server. The admin helpers here are
//! shared with the Redlock harness.

use async_trait::async_trait;
use distlock_core::{BoxError, Capabilities, DynLock, LockKey};
use distlock_redis::{LockKeys, RedisBackend, RedisConfig, lock_key_pattern};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{RedisServer, external_url};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

/// The namespace the suite's locks live under.
pub const NAMESPACE: &str = "distlock-conformance:";

/// Every hook.
pub const HOOKS: Hooks = Hooks {
    delete_lock: true,
    faulty_client: true,
    restart: true,
    residue: true,
};

/// The Redis backend's spec.
pub fn spec() -> BackendSpec {
    BackendSpec {
        name: "redis".into(),
        capabilities: RedisBackend::CAPABILITIES,
        hooks: HOOKS,
        start: Box::new(|| Box::pin(async { Ok(Arc::new(RedisHarness::start().await?) as _) })),
    }
}

/// Starts `count` servers. The launcher's future is not `Send` (its retry helper
/// takes an async closure) and harness futures must be, so it runs on a blocking
/// thread of the same runtime.
pub async fn launch_servers(count: usize) -> Result<Vec<RedisServer>, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    Ok(
        tokio::task::spawn_blocking(move || runtime.block_on(RedisServer::start_many(count)))
            .await??,
    )
}

/// A raw connection for what an operator would do by hand.
#[derive(Clone)]
pub struct Admin {
    conn: redis::aio::MultiplexedConnection,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Admin")
    }
}

impl Admin {
    /// Connects to the server at `url`.
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let client = redis::Client::open(url)?;
        Ok(Admin {
            conn: client.get_multiplexed_async_connection().await?,
        })
    }

    /// Deletes `key`'s lock behind its holder's back.
    pub async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        let mut conn = self.conn.clone();
        let keys = LockKeys::new(NAMESPACE, key);
        let _: i64 = redis::cmd("DEL")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The lock keys (not fence counters) for names starting with `prefix`.
    pub async fn lock_keys(&self, prefix: &str) -> Result<HashSet<String>, BoxError> {
        let mut conn = self.conn.clone();
        let pattern = lock_key_pattern(NAMESPACE, prefix);
        let mut cursor = 0_u64;
        let mut found = HashSet::new();
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            found.extend(keys);
            if next == 0 {
                return Ok(found);
            }
            cursor = next;
        }
    }
}

/// The address of the server at a `redis://` URL, for a fault proxy in front.
pub async fn server_addr(url: &str) -> Result<SocketAddr, BoxError> {
    let info = redis::Client::open(url)?
        .get_connection_info()
        .addr()
        .to_string();
    tokio::net::lookup_host(&info)
        .await?
        .next()
        .ok_or_else(|| format!("{info} does not resolve").into())
}

/// `url` with its host and port replaced by `addr`.
pub fn via(url: &str, addr: SocketAddr) -> Result<String, BoxError> {
    let mut url = url::Url::parse(url)?;
    url.set_host(Some(&addr.ip().to_string()))?;
    url.set_port(Some(addr.port()))
        .map_err(|()| "cannot set the port")?;
    Ok(url.to_string())
}

/// The harness: a server (launched or external) and an admin connection.
#[derive(Debug)]
pub struct RedisHarness {
    server: Option<RedisServer>,
    url: String,
    admin: Admin,
}

impl RedisHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("redis") {
            Some(url) => Self::with(None, url).await,
            None => Self::launch().await,
        }
    }

    async fn launch() -> Result<Self, BoxError> {
        let server = launch_servers(1).await?.pop().ok_or("no server started")?;
        let url = server.url();
        Self::with(Some(server), url).await
    }

    async fn with(server: Option<RedisServer>, url: String) -> Result<Self, BoxError> {
        let admin = Admin::connect(&url).await?;
        Ok(RedisHarness { server, url, admin })
    }

    async fn connect(url: &str) -> Result<DynLock, BoxError> {
        Ok(Arc::new(
            RedisConfig::from_url(url)?
                .namespace(NAMESPACE)
                .connect()
                .await?,
        ))
    }
}

#[async_trait]
impl Harness for RedisHarness {
    fn name(&self) -> &str {
        "redis"
    }

    fn capabilities(&self) -> Capabilities {
        RedisBackend::CAPABILITIES
    }

    fn hooks(&self) -> Hooks {
        HOOKS
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Self::connect(&self.url).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let proxy = Arc::new(FaultProxy::start(server_addr(&self.url).await?).await?);
        Ok(FaultyClient {
            lock: Self::connect(&via(&self.url, proxy.addr())?).await?,
            faults: proxy,
        })
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        self.admin.delete_lock(key).await
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    async fn restart_server(&self) -> Result<(), BoxError> {
        let server = self
            .server
            .as_ref()
            .ok_or("cannot restart an external server")?;
        Ok(server.restart().await?)
    }

    async fn residue(&self, prefix: &str) -> Result<usize, BoxError> {
        Ok(self.admin.lock_keys(prefix).await?.len())
    }

    fn server_logs(&self) -> String {
        match &self.server {
            Some(server) => server.log_tail(40),
            None => "(external server)".into(),
        }
    }
}
