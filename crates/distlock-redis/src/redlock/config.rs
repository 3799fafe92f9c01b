//! `RedlockConfig`: N independent Redis servers, from a struct or a URL.

use crate::config::RedisConfig;
use crate::keys::{DEFAULT_NAMESPACE, validate_namespace};
use crate::redlock::lock::{Redlock, RedlockBackend};
use crate::server::{Server, check_timeout, parse_duration, redact};
use distlock_core::{AcquireOptions, BackendLock, LockError};
use std::time::Duration;

pub(crate) const BACKEND: &str = "redlock";

/// Settings for [`Redlock`]. Build it with [`RedlockConfig::from_url`],
/// [`RedlockConfig::from_urls`] or [`RedlockConfig::new`], then
/// [`RedlockConfig::connect`].
///
/// URL form: `redlock://[user[:password]@]host1[:port],host2[:port],...[/db][?...]`
/// (`redlocks://` for TLS), with the same credentials and database on every node.
/// Parameters: `namespace`, `ttl` (default ttl), `connect_timeout` (`5s`),
/// `node_timeout` (per-node reply timeout, `250ms`), `retry_delay` (largest random
/// delay before a retry, `20ms`).
///
/// Use an odd number of nodes, at least 3: N nodes tolerate ⌊(N−1)/2⌋ failures,
/// so an even N buys no extra tolerance, and fewer than 3 tolerate none. Both are
/// accepted with a warning in the log.
///
/// ```
/// use distlock_redis::RedlockConfig;
/// let config = RedlockConfig::from_url("redlock://:pw@10.0.0.1,10.0.0.2:6380,10.0.0.3/0?node_timeout=100ms")?;
/// assert_eq!(config.endpoints(), vec!["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6380/0", "redis://10.0.0.3:6379/0"]);
/// assert!(RedlockConfig::from_url("redlock://a,a").is_err()); // duplicate node
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedlockConfig {
    pub(crate) nodes: Vec<Server>,
    pub(crate) namespace: String,
    pub(crate) default_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) retry_delay: Duration,
}

impl std::fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockConfig")
            .field("nodes", &self.nodes)
            .field("namespace", &self.namespace)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("retry_delay", &self.retry_delay)
            .finish()
    }
}

impl RedlockConfig {
    /// The default per-node reply timeout: 250 ms.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(250);
    /// The default largest random delay before a retry: 20 ms.
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(20);

    /// A Redlock over these servers (their namespaces and timeouts are ignored;
    /// set them here).
    pub fn new(nodes: impl IntoIterator<Item = RedisConfig>) -> Self {
        RedlockConfig {
            nodes: nodes.into_iter().map(|c| c.server).collect(),
            namespace: DEFAULT_NAMESPACE.into(),
            default_ttl: AcquireOptions::DEFAULT_TTL,
            connect_timeout: RedisConfig::DEFAULT_CONNECT_TIMEOUT,
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
            retry_delay: Self::DEFAULT_RETRY_DELAY,
        }
    }

    /// One `redis://` or `rediss://` URL per node (query parameters are not
    /// allowed on them; set options here).
    pub fn from_urls<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut nodes = Vec::new();
        for url in urls {
            let (server, params) = Server::parse(BACKEND, url.as_ref())?;
            if let Some((key, _)) = params.first() {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "`{key}` on a node URL: set namespace and timeouts on the RedlockConfig"
                    ),
                ));
            }
            nodes.push(server);
        }
        let config = RedlockConfig {
            nodes,
            ..Self::new([])
        };
        config.validate()?;
        Ok(config)
    }

    /// Parses `redlock://h1,h2,h3/db?params` (see the type docs).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let bad = |why: String| LockError::config(BACKEND, why);
        let shown = redact(url);
        let (scheme, rest) = url.trim().split_once("://").ok_or_else(|| {
            bad(format!(
                "`{shown}` is not a URL; write redlock://host1,host2,host3"
            ))
        })?;
        let node_scheme = match scheme {
            "redlock" => "redis",
            "redlocks" => "rediss",
            other => {
                return Err(bad(format!(
                    "unsupported scheme `{other}://`; use redlock:// or redlocks:// for TLS"
                )));
            }
        };
        let (rest, query) = rest.split_once('?').map_or((rest, ""), |(r, q)| (r, q));
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (userinfo, hosts) = authority
            .rsplit_once('@')
            .map_or(("", authority), |(u, h)| (u, h));
        let userinfo = if userinfo.is_empty() {
            String::new()
        } else {
            format!("{userinfo}@")
        };
        let mut nodes = Vec::new();
        for host in hosts.split(',') {
            if host.trim().is_empty() {
                return Err(bad(format!(
                    "empty node in `{shown}`; list nodes as host1,host2,host3"
                )));
            }
            let (server, _) = Server::parse(
                BACKEND,
                &format!("{node_scheme}://{userinfo}{}/{path}", host.trim()),
            )?;
            nodes.push(server);
        }
        let mut config = RedlockConfig {
            nodes,
            ..Self::new([])
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "namespace" => config.namespace = value.to_owned(),
                "ttl" => config.default_ttl = parse_duration(BACKEND, key, value)?,
                "connect_timeout" => config.connect_timeout = parse_duration(BACKEND, key, value)?,
                "node_timeout" => config.node_timeout = parse_duration(BACKEND, key, value)?,
                "retry_delay" => config.retry_delay = parse_duration(BACKEND, key, value)?,
                _ => {
                    return Err(bad(format!(
                        "unknown URL parameter `{key}`; known: namespace, ttl, connect_timeout, node_timeout, retry_delay"
                    )));
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Puts every key under this prefix (default `distlock:`), on every node.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The ttl of [`RedlockBackend::default_options`].
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long to wait for the first connection to each node (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one round waits for each node's reply (default 250 ms). Keep it
    /// well under the ttl: every round spends up to this much of the validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The largest random delay before a retry (default 20 ms), so that
    /// contenders that split the vote do not collide again.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Every node, without credentials.
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(Server::endpoint).collect()
    }

    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if self.nodes.is_empty() {
            return Err(LockError::config(
                BACKEND,
                "no nodes; list at least 3 independent Redis servers",
            ));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i]
                .iter()
                .any(|earlier| earlier.address() == node.address())
            {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "{} is listed twice; every node must be a separate server",
                        node.endpoint()
                    ),
                ));
            }
            if node.host.is_empty() || node.port == 0 {
                return Err(LockError::config(
                    BACKEND,
                    format!("node `{}` has no host or port", node.endpoint()),
                ));
            }
        }
        validate_namespace(BACKEND, &self.namespace)?;
        check_timeout(BACKEND, "connect_timeout", self.connect_timeout)?;
        check_timeout(BACKEND, "node_timeout", self.node_timeout)?;
        AcquireOptions::new()
            .ttl(self.default_ttl)
            .validate(&crate::redlock::lock::capabilities())
            .map_err(|e| LockError::config(BACKEND, format!("default ttl: {e}")))
    }

    /// Connects to every node at once. Succeeds when a majority answers (a
    /// minority that is down, or rejects the password, is retried at each
    /// acquire and logged); fails with [`LockError::QuorumUnavailable`] naming
    /// each failed node otherwise.
    pub async fn connect(self) -> Result<Redlock, LockError> {
        self.validate()?;
        let n = self.nodes.len();
        if n < 3 || n.is_multiple_of(2) {
            tracing::warn!(
                nodes = n,
                "redlock with {n} nodes: use an odd number, at least 3 (N nodes tolerate (N-1)/2 failures)"
            );
        }
        Ok(BackendLock::new(RedlockBackend::connect(self).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(r: Result<RedlockConfig, LockError>) -> String {
        match r {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected Config error, got {other:?}"),
        }
    }

    #[test]
    fn parses_nodes_credentials_and_parameters() {
        let c = RedlockConfig::from_url("redlocks://u:p%40ss@a:1,b:2,[::1]:3/4?namespace=x:&node_timeout=50ms&retry_delay=5ms&ttl=3s").unwrap();
        assert_eq!(
            c.endpoints(),
            vec!["rediss://a:1/4", "rediss://b:2/4", "rediss://[::1]:3/4"]
        );
        assert!(
            c.nodes.iter().all(
                |n| n.password.as_deref() == Some("p@ss") && n.username.as_deref() == Some("u")
            )
        );
        assert_eq!(c.namespace, "x:");
        assert_eq!(c.node_timeout, Duration::from_millis(50));
        assert_eq!(c.retry_delay, Duration::from_millis(5));
        assert_eq!(c.default_ttl, Duration::from_secs(3));
    }

    #[test]
    fn bad_node_lists_are_config_errors() {
        assert!(reason(RedlockConfig::from_url("redlock://a,,b")).contains("empty node"));
        assert!(reason(RedlockConfig::from_url("redlock://a:1,A:1")).contains("twice"));
        assert!(reason(RedlockConfig::from_url("redlock://a,a:6379")).contains("twice"));
        assert!(reason(RedlockConfig::from_url("redis://a,b,c")).contains("scheme"));
        assert!(reason(RedlockConfig::from_url("redlock://a,b,c?bogus=1")).contains("bogus"));
        assert!(reason(RedlockConfig::from_url("redlock://a:notaport,b,c")).contains("parse"));
        assert!(reason(RedlockConfig::from_urls(Vec::<String>::new())).contains("no nodes"));
        assert!(reason(RedlockConfig::from_urls(["redis://a", "redis://a"])).contains("twice"));
        assert!(reason(RedlockConfig::from_urls(["redis://a?namespace=x"])).contains("namespace"));
    }

    #[test]
    fn debug_and_errors_hide_passwords() {
        let c = RedlockConfig::from_url("redlock://:hunter2@a,b,c").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = reason(RedlockConfig::from_url("redlock://:hunter2@a,a"));
        assert!(!e.contains("hunter2"), "{e}");
    }
}
