//! Redis, one node: a `redis-server` started by the testkit (no persistence, so a
//! restart empties it), or `DISTLOCK_TEST_REDIS_URL`.
//!
//! Every hook is offered: operator deletion and residue through the adapter's
//! own `Inspect`, faults through a TCP fault proxy per faulty client, restarts on
//! a dedicated server. The launching and proxy helpers here are shared with the
//! Redlock harness.

use async_trait::async_trait;
use distlock_core::toolkit::LockUrl;
use distlock_core::{BoxError, Capabilities, DynLock};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testkit::harness::{FaultyClient, Harness, Hooks};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::runner::BackendSpec;
use distlock_testkit::servers::{Launched, RedisOptions, RedisServer, external_url};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The namespace the suite's locks live under.
pub const NAMESPACE: &str = "distlock-conformance:";

/// Every hook.
pub const HOOKS: Hooks = Hooks {
    delete_lock: true,
    faulty_client: true,
    restart: true,
    residue: true,
    holder_process: true,
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

/// The address of the server at a `redis://` URL, for a fault proxy in front.
pub async fn server_addr(url: &str) -> Result<SocketAddr, BoxError> {
    let parsed = LockUrl::parse("redis", url)?;
    let host = parsed.hosts().first().ok_or("the URL names no host")?;
    let address = host.address(6379);
    tokio::net::lookup_host(&address)
        .await?
        .next()
        .ok_or_else(|| format!("{address} does not resolve").into())
}

/// `url` with its host and port replaced by `addr`; credentials, database and
/// parameters are kept.
pub fn via(url: &str, addr: SocketAddr) -> Result<String, BoxError> {
    let (scheme, rest) = url.split_once("://").ok_or("not a URL")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority
        .rsplit_once('@')
        .map_or("", |(userinfo, _)| userinfo);
    let at = if userinfo.is_empty() { "" } else { "@" };
    Ok(format!("{scheme}://{userinfo}{at}{addr}{tail}"))
}

/// `url` with the query parameter `param` (`name=value`) added; `url` itself
/// when `param` is empty.
pub fn with_param(url: &str, param: &str) -> String {
    if param.is_empty() {
        return url.to_owned();
    }
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{param}")
}

/// The `state_ttl` URL parameter for `state_ttl`.
pub fn state_ttl_param(state_ttl: Duration) -> String {
    format!("state_ttl={}ms", state_ttl.as_millis())
}

/// The harness: a server (launched or external) and the inspecting client.
#[derive(Debug)]
pub struct RedisHarness {
    server: Option<RedisServer>,
    url: String,
    inspector: DynLock,
}

impl RedisHarness {
    async fn start() -> Result<Self, BoxError> {
        match external_url("redis") {
            Some(url) => Self::with(None, url).await,
            None => Self::launch().await,
        }
    }

    /// A harness on a server of its own.
    pub async fn launch() -> Result<Self, BoxError> {
        let server = launch_servers(1).await?.pop().ok_or("no server started")?;
        let url = server.url();
        Self::with(Some(server), url).await
    }

    /// A harness on a server of its own started with `options`, whose clients
    /// (and [`Harness::lock_url`]) all carry `params`, such as
    /// `restart_guard=1s&ttl=1s`.
    pub async fn launch_with(options: RedisOptions, params: &str) -> Result<Self, BoxError> {
        let runtime = tokio::runtime::Handle::current();
        let start = move || runtime.block_on(RedisServer::start_with(options));
        let server = tokio::task::spawn_blocking(start).await??;
        let url = format!("{}?{params}", server.url());
        Self::with(Some(server), url).await
    }

    /// A harness whose clients all carry `params` (such as `fair=true`): on
    /// `DISTLOCK_TEST_REDIS_URL` when it is set, else on a server of its own.
    pub async fn start_with(params: &str) -> Result<Self, BoxError> {
        match external_url("redis") {
            Some(url) => Self::with(None, with_param(&url, params)).await,
            None => Self::launch_with(RedisOptions::default(), params).await,
        }
    }

    async fn with(server: Option<RedisServer>, url: String) -> Result<Self, BoxError> {
        let inspector = Self::connect(&url).await?;
        Ok(RedisHarness {
            server,
            url,
            inspector,
        })
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

    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        Self::connect(&with_param(&self.url, &state_ttl_param(state_ttl))).await
    }

    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        let proxy = Arc::new(FaultProxy::start(server_addr(&self.url).await?).await?);
        Ok(FaultyClient::new(
            Self::connect(&via(&self.url, proxy.addr())?).await?,
            proxy,
        ))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(self.inspector.clone())
    }

    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Ok(Arc::new(Self::launch().await?))
    }

    fn launched(&self) -> Option<&dyn Launched> {
        self.server.as_ref().map(|server| server as &dyn Launched)
    }

    fn lock_url(&self) -> Option<String> {
        Some(with_param(&self.url, &format!("namespace={NAMESPACE}")))
    }
}

/// One Redis node for the fence target.
pub async fn launch_url() -> Result<crate::Running, BoxError> {
    let node = launch_servers(1)
        .await?
        .pop()
        .ok_or("no Redis server started")?;
    Ok(crate::Running::new(node.url(), node))
}
