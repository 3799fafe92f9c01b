//! Configuration from a struct or an `etcd://` URL, and connecting.

use crate::backend::{EtcdBackend, EtcdLock};
use crate::client::{Client, ConnectOptions};
use crate::election::EtcdElection;
use crate::error::{BACKEND, Endpoints};
use crate::rpc::Rpc;
use crate::rwlock::EtcdRwLockBackend;
use crate::semaphore::EtcdSemaphoreBackend;
use distlock_core::adapter::BackendLock;
use distlock_core::toolkit::{DEFAULT_STATE_TTL, Host, LockUrl, Timeouts, check_state_ttl};
use distlock_core::{AcquireOptions, LockError};
use std::sync::Arc;
use std::time::Duration;

/// The namespace used when none is given.
pub const DEFAULT_NAMESPACE: &str = "distlock/";
const DEFAULT_PORT: u16 = 2379;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 ping interval: finds dead connections (etcd refuses pings under 5 s apart).
const PING_INTERVAL: Duration = Duration::from_secs(10);
/// The URL parameters of `etcds://` only.
const TLS_PARAMS: [&str; 4] = ["ca", "cert", "key", "domain"];

/// How to reach etcd and where to keep the locks.
///
/// ```
/// use distlock_core::toolkit::Timeouts;
/// use distlock_etcd::EtcdConfig;
/// use std::time::Duration;
/// let config = EtcdConfig::new(["10.0.0.1:2379", "10.0.0.2:2379"])
///     .namespace("billing/locks/")
///     .auth("locker", "s3cret")
///     .timeouts(Timeouts::new(Duration::from_secs(5), Duration::from_secs(2)));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// let same = EtcdConfig::from_url("etcd://locker:s3cret@10.0.0.1:2379,10.0.0.2:2379/billing/locks?timeout=2s")?;
/// assert_eq!(format!("{config:?}"), format!("{same:?}"));
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    namespace: String,
    user: Option<(String, String)>,
    timeouts: Timeouts,
    defaults: AcquireOptions,
    state_ttl: Duration,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::EtcdTls>,
    /// The application's own channel, used instead of the endpoints.
    channel: Option<tonic::transport::Channel>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("EtcdConfig");
        s.field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("password", &self.user.as_ref().map(|_| "<redacted>"))
            .field("timeouts", &self.timeouts)
            .field("defaults", &self.defaults)
            .field("state_ttl", &self.state_ttl)
            .field(
                "channel",
                &self.channel.as_ref().map(|_| "<the application's>"),
            );
        #[cfg(feature = "tls")]
        s.field("tls", &self.tls);
        s.finish()
    }
}

fn config_error(reason: impl Into<String>) -> LockError {
    LockError::config(BACKEND, reason)
}

/// The namespace a URL path names: none is the default, `/` alone the root, and
/// anything else that path with a trailing `/`.
fn namespace_from_path(path: Option<&str>) -> String {
    match path {
        None => DEFAULT_NAMESPACE.to_owned(),
        Some(path) if path.is_empty() || path.ends_with('/') => path.to_owned(),
        Some(path) => format!("{path}/"),
    }
}

impl EtcdConfig {
    /// Endpoints as `host:port` (port 2379 when left out), the default namespace
    /// (`distlock/`) and 5 s connect and request timeouts.
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            user: None,
            timeouts: Timeouts::new(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT),
            defaults: AcquireOptions::new(),
            state_ttl: DEFAULT_STATE_TTL,
            #[cfg(feature = "tls")]
            tls: None,
            channel: None,
        }
    }

    /// Every request on your application's own tonic `Channel` to etcd (its
    /// endpoints, balancing, TLS, connect timeout and HTTP/2 settings), with
    /// this config's other settings: namespace, login ([`EtcdConfig::auth`]),
    /// timeouts (per request), acquire defaults, `state_ttl`.
    ///
    /// A channel, not an etcd client: this adapter speaks etcd's gRPC API
    /// itself (no etcd-client crate, whose build needs `protoc`), and a
    /// channel is what any tonic application already has to etcd or can
    /// build in one line; endpoints are what [`EtcdConfig::new`] takes.
    /// distlock opens no connection of its own: it multiplexes over the
    /// channel's HTTP/2 connections one lease per ttl in use with its
    /// keep-alive stream, one watch stream shared by every waiter and held
    /// lease, and unary KV and lease requests, each sending `hasleader` (a
    /// member cut off from its leader refuses) and, when a user is set, the
    /// login token. The channel's own settings stay as you built them: give
    /// its endpoints `http2_keep_alive_interval` (distlock's own use 10 s)
    /// so that a dead connection is found before a lease runs out. Dropping
    /// your clones of the channel closes nothing while the lock lives.
    ///
    /// ```no_run
    /// use distlock_core::{AcquireOptions, DistributedLock, LockKey};
    /// use distlock_etcd::EtcdConfig;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // The app's own channel to etcd.
    /// let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:2379").connect_lazy();
    /// let lock = EtcdConfig::from_channel(channel).namespace("shop/").connect().await?;
    /// let lease = lock.acquire(&LockKey::new("sku-42")?, &AcquireOptions::new()).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_channel(channel: tonic::transport::Channel) -> Self {
        EtcdConfig {
            channel: Some(channel),
            ..Self::new(Vec::<String>::new())
        }
    }

    /// The raw key prefix every lock key starts with, used verbatim like Go's
    /// `namespace.NewKV` (so include the trailing `/`). `""` puts locks at the root,
    /// where `etcdctl lock NAME` keeps them.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Logs in as `user`. The password never appears in `Debug` or errors.
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Longest wait for a connection to an endpoint, and for any one reply (a
    /// request that could not reach a member is retried within it). 5 s each by
    /// default.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The lock's [`distlock_core::DistributedLock::default_options`] (the URL's
    /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`); checked against etcd's limits at
    /// connect.
    pub fn defaults(mut self, defaults: AcquireOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// How long a name's state may outlive its last lease (default 24 h, at
    /// least 2 s), the setting every scheme takes. On etcd every key of a name
    /// is on a holder's or waiter's lease, so nothing outlives the leases and
    /// no value changes what is kept; it is checked like everywhere else so
    /// one set of URLs works on every backend.
    pub fn state_ttl(mut self, state_ttl: Duration) -> Self {
        self.state_ttl = state_ttl;
        self
    }

    /// Connects over TLS with these settings (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Parses `etcd://[user:password@]host[:port][,host[:port]...][/namespace][?name=value&...]`.
    ///
    /// - The path is the namespace, with a `/` appended when missing: `/locks` gives
    ///   `locks/`, `/` gives the root (where `etcdctl lock` keeps its locks), and no
    ///   path gives `distlock/`. Percent-escapes are decoded. `?namespace=locks`, the
    ///   parameter every scheme takes, means the same as the path `/locks`.
    /// - Parameters: `connect_timeout` and `timeout` (`500ms`, `5s`, `1m`;
    ///   `request_timeout` is now `timeout`), and the acquire defaults `ttl`,
    ///   `wait`, `renewal`, `max_hold`, `min_hold` (see [`EtcdConfig::defaults`]), and
    ///   `state_ttl` (`24h`, at least `2s`; see [`EtcdConfig::state_ttl`]).
    /// - `etcds://` connects over TLS (feature `tls`), with parameters `ca`, `cert`,
    ///   `key` (PEM file paths) and `domain` (the name to verify).
    ///
    /// Unknown parameters are refused, naming the known ones.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let mut url = LockUrl::parse(BACKEND, url)?;
        let tls = match url.scheme() {
            "etcd" => false,
            "etcds" => true,
            other => {
                return Err(url.error(format_args!("scheme `{other}` is neither etcd nor etcds")));
            }
        };
        if url.hosts().is_empty() {
            return Err(url.error("no hosts; write etcd://host[:port][,host[:port]…]"));
        }
        let mut config = EtcdConfig::new(url.hosts().iter().map(ToString::to_string));
        // `namespace=` is the parameter every scheme takes; the path is etcd's own
        // spelling of it (as etcdctl users write prefixes). One, not both.
        let parameter = url.string("namespace");
        config.namespace = match (url.path(), parameter) {
            (Some(_), Some(_)) => {
                return Err(url.error(
                    "the namespace is given twice, as the path and as `namespace=`; keep one",
                ));
            }
            (path, parameter) => namespace_from_path(path.or(parameter.as_deref())),
        };
        config.user = match (url.user(), url.password()) {
            (Some(user), Some(password)) => Some((user.to_owned(), password.to_owned())),
            (None, None) => None,
            (Some(_), None) => return Err(url.error("a user needs a password (user:password@)")),
            (None, Some(_)) => return Err(url.error("the user name is empty")),
        };
        config.timeouts = config.timeouts.read(&mut url)?;
        config.defaults = AcquireOptions::new().read(&mut url)?;
        config.state_ttl = url.duration("state_ttl")?.unwrap_or(config.state_ttl);
        let tls_params: Vec<(&'static str, String)> = TLS_PARAMS
            .into_iter()
            .filter_map(|name| url.string(name).map(|value| (name, value)))
            .collect();
        url.finish()?;
        if let Some((name, _)) = tls_params.first().filter(|_| !tls) {
            return Err(url.error(format_args!("parameter `{name}` needs an etcds:// URL")));
        }
        #[cfg(feature = "tls")]
        if tls {
            let settings = crate::tls::EtcdTls::from_params(&tls_params);
            config.tls = Some(settings.map_err(|why| url.error(why))?);
        }
        #[cfg(not(feature = "tls"))]
        if tls {
            return Err(
                url.error("etcds:// needs TLS support, which this build lacks: enable the `tls` feature of the distlock crate (or of distlock-etcd when used directly)")
            );
        }
        Ok(config)
    }

    /// Checks the settings and returns the endpoints as `host:port`.
    fn validate(&self) -> Result<Vec<String>, LockError> {
        if self.endpoints.is_empty() && self.channel.is_none() {
            return Err(config_error("no endpoints; give at least one host:port"));
        }
        let mut addresses = Vec::with_capacity(self.endpoints.len());
        for endpoint in &self.endpoints {
            if endpoint.contains('@') {
                // Not quoted: the part before `@` may be a password.
                return Err(config_error(
                    "an endpoint contains `@`; credentials go in the user:password@ part of \
                     the URL or in EtcdConfig::auth",
                ));
            }
            let host = Host::parse(endpoint.trim()).map_err(config_error)?;
            addresses.push(host.address(DEFAULT_PORT));
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            if self.channel.is_some() {
                return Err(config_error(
                    "TLS is set on a config built from a channel, which has its own: build the \
                     channel's endpoints with tls_config and drop EtcdConfig::tls",
                ));
            }
            tls.validate()?;
        }
        self.timeouts.validate(BACKEND)?;
        check_state_ttl(BACKEND, self.state_ttl)?;
        if self.user.as_ref().is_some_and(|(user, _)| user.is_empty()) {
            return Err(config_error("the user name is empty"));
        }
        Ok(addresses)
    }

    fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Connects, logs in, and learns the cluster's minimum lease ttl (one grant and
    /// one revoke). Unreachable endpoints and refused credentials give
    /// `Unavailable` and `Config` errors within the connect and request timeouts.
    pub async fn connect(self) -> Result<EtcdLock, LockError> {
        let addresses = self.validate()?;
        let scheme = if self.uses_tls() { "https" } else { "http" };
        let urls: Vec<String> = addresses
            .iter()
            .map(|address| format!("{scheme}://{address}"))
            .collect();
        let rpc = Rpc {
            endpoints: match self.channel {
                Some(_) => Endpoints::new(&["the application's channel".to_owned()]),
                None => Endpoints::new(&addresses),
            },
            timeout: self.timeouts.reply,
        };
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.timeouts.connect)
            .with_keep_alive(PING_INTERVAL, self.timeouts.reply)
            // A member cut off from the leader fails requests and ends watches at
            // once, instead of serving a watch that will never fire.
            .with_require_leader(true);
        if let Some((user, password)) = &self.user {
            options = options.with_user(user, password);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.client_options());
        }
        let budget = self.timeouts.connect + self.timeouts.reply;
        let connect = async {
            match self.channel.clone() {
                Some(channel) => Client::from_channel(channel, options).await,
                None => Client::connect(&urls, Some(options)).await,
            }
        };
        let client = match tokio::time::timeout(budget, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(rpc
                    .endpoints
                    .lock_error(rpc.endpoints.classify("connect", e)));
            }
            Err(_) => {
                return Err(rpc
                    .endpoints
                    .unavailable(format!("no connection within {budget:?}")));
            }
        };
        let backend = EtcdBackend::start(&client, self.namespace, rpc, budget).await;
        #[cfg(feature = "tls")]
        let backend = backend.map_err(|e| match self.tls {
            Some(_) => crate::tls::hint(e),
            None => e,
        });
        BackendLock::shared_with_primitives(
            Arc::new(backend?),
            EtcdSemaphoreBackend::new,
            EtcdElection::new,
            EtcdRwLockBackend::new,
        )
        .with_defaults(self.defaults)
    }
}

#[cfg(test)]
mod tests;
