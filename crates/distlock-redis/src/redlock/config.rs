//! `RedlockConfig`: N independent Redis servers, from a struct or a URL.

use super::BACKEND;
use super::backend::{Redlock, RedlockBackend};
use crate::address::ServerAddress;
use crate::config::{Common, RedisConfig, Schemes, read_servers};
use distlock_core::LockError;
use distlock_core::adapter::BackendLock;
use distlock_core::toolkit::Timeouts;
use std::time::Duration;

/// Settings for [`Redlock`]. Build it with [`RedlockConfig::from_url`],
/// [`RedlockConfig::from_urls`] or [`RedlockConfig::new`], then
/// [`RedlockConfig::connect`].
///
/// URL form: `redlock://[user[:password]@]host1[:port],host2[:port],...[/db][?...]`
/// (`redlocks://` for TLS), with the same credentials and database on every node.
/// Parameters: `namespace`, `ttl` (default ttl), `connect_timeout` (`5s`),
/// `timeout` (per-node reply timeout, `250ms`), `retry_delay` (largest random
/// delay before a retry, `20ms`), `restart_guard` (off; see
/// [`RedlockConfig::restart_guard`]), `state_ttl` (`24h`, at least `2s`; see
/// [`RedlockConfig::state_ttl`]), `protocol`, `insecure` and the TLS files
/// `ca`, `cert`, `key` as for `redis://` (the same on every node).
///
/// Use an odd number of nodes, at least 3: N nodes tolerate ⌊(N−1)/2⌋ failures,
/// so an even N buys no extra tolerance (accepted, with a warning from `distlock
/// check`), and fewer than 3 tolerate none: 1 or 2 nodes are refused unless you
/// say so with `allow_few_nodes=true` ([`RedlockConfig::allow_few_nodes`]), for
/// example in a test.
///
/// ```
/// use distlock_redis::RedlockConfig;
/// let config = RedlockConfig::from_url("redlock://:pw@10.0.0.1,10.0.0.2:6380,10.0.0.3/0?timeout=100ms")?;
/// assert_eq!(config.endpoints(), vec!["redis://10.0.0.1:6379/0", "redis://10.0.0.2:6380/0", "redis://10.0.0.3:6379/0"]);
/// assert!(RedlockConfig::from_url("redlock://a,a").is_err()); // duplicate node
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedlockConfig {
    nodes: Vec<ServerAddress>,
    common: Common,
    retry_delay: Duration,
    allow_few_nodes: bool,
}

impl RedlockConfig {
    /// The default per-node reply timeout: 250 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);
    /// The default largest random delay before a retry: 20 ms.
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(20);

    /// A Redlock over these servers (their namespaces and timeouts are ignored;
    /// set them here).
    pub fn new(nodes: impl IntoIterator<Item = RedisConfig>) -> Self {
        RedlockConfig {
            nodes: nodes.into_iter().map(|c| c.server).collect(),
            common: Common::new(Self::DEFAULT_TIMEOUT),
            retry_delay: Self::DEFAULT_RETRY_DELAY,
            allow_few_nodes: false,
        }
    }

    /// One `redis://` or `rediss://` URL per node (only `protocol`, `insecure`
    /// and the TLS files `ca`, `cert`, `key` are allowed on them; set the other
    /// options here).
    pub fn from_urls<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut nodes = Vec::new();
        for url in urls {
            let (url, servers) = read_servers(BACKEND, url.as_ref(), Schemes::Redis)?;
            url.finish().map_err(|e| match e {
                LockError::Config { backend, reason } => LockError::Config {
                    backend,
                    reason: format!(
                        "{reason}; set namespace, ttl and timeouts on the RedlockConfig"
                    ),
                },
                other => other,
            })?;
            nodes.extend(servers);
        }
        let config = RedlockConfig {
            nodes,
            ..Self::new([])
        };
        config.validate_nodes()?;
        Ok(config)
    }

    /// Parses `redlock://h1,h2,h3/db?params` (see the type docs).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let (mut url, nodes) = read_servers(BACKEND, url, Schemes::Redlock)?;
        let mut config = RedlockConfig {
            nodes,
            ..Self::new([])
        };
        config.common.read(&mut url)?;
        config.retry_delay = url.duration("retry_delay")?.unwrap_or(config.retry_delay);
        config.allow_few_nodes = url.bool("allow_few_nodes")?.unwrap_or(false);
        url.finish()?;
        config.validate()?;
        Ok(config)
    }

    /// Accepts 1 or 2 nodes, which tolerate no failure (refused by default).
    pub fn allow_few_nodes(mut self, allow: bool) -> Self {
        self.allow_few_nodes = allow;
        self
    }

    /// Puts every key under this prefix (default `distlock:`), on every node.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.common.namespace = namespace.into();
        self
    }

    /// The lock's [`distlock_core::DistributedLock::default_options`] (the URL's
    /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`).
    pub fn defaults(mut self, defaults: distlock_core::AcquireOptions) -> Self {
        self.common.defaults = defaults;
        self
    }

    /// How long to wait for the first connection to each node (default 5 s), and
    /// how long one round waits for each node's reply (default 250 ms; keep it
    /// well under the ttl: every round spends up to this much of the validity).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.common.timeouts = timeouts;
        self
    }

    /// Makes every node refuse locks after it lost its state (a restart without
    /// persistence, a restart or failover to another process) until `guard` has
    /// passed: Redlock's delayed-restart rule, enforced by each node rather than
    /// by operators. Set it to at least the longest ttl in use, on every client;
    /// see [`crate::RedisConfig::restart_guard`] for how it works. Off by default.
    pub fn restart_guard(mut self, guard: Duration) -> Self {
        self.common.restart_guard = Some(guard);
        self
    }

    /// How long a name's fence counter outlives its last lease on each node
    /// (default 24 h, at least 2 s); see [`crate::RedisConfig::state_ttl`].
    /// The fence round raises each node's high-water with its counter, so a
    /// later majority hands out a greater token also after a collection.
    pub fn state_ttl(mut self, state_ttl: Duration) -> Self {
        self.common.state_ttl = state_ttl;
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
        self.nodes.iter().map(ServerAddress::endpoint).collect()
    }

    /// Every check but the node count, which `connect` makes, so that
    /// [`RedlockConfig::allow_few_nodes`] can follow `from_urls`.
    fn validate_nodes(&self) -> Result<(), LockError> {
        if self.nodes.is_empty() {
            return Err(LockError::config(
                BACKEND,
                "no nodes; list at least 3 independent Redis servers",
            ));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i]
                .iter()
                .any(|earlier| earlier.identity() == node.identity())
            {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "{} is listed twice; every node must be a separate server",
                        node.endpoint()
                    ),
                ));
            }
            node.tls_files.validate(BACKEND)?;
            if node.host.is_empty() || node.port == 0 {
                return Err(LockError::config(
                    BACKEND,
                    format!("node `{}` has no host or port", node.endpoint()),
                ));
            }
        }
        self.common.validate(BACKEND, &RedlockBackend::CAPABILITIES)
    }

    fn validate(&self) -> Result<(), LockError> {
        self.validate_nodes()?;
        if self.nodes.len() < 3 && !self.allow_few_nodes {
            return Err(LockError::config(
                BACKEND,
                format!(
                    "{} node(s) tolerate no failure, so Redlock adds nothing over one Redis; \
                     list at least 3 independent servers, use redis:// for one, or add \
                     allow_few_nodes=true if this is on purpose (a test)",
                    self.nodes.len()
                ),
            ));
        }
        Ok(())
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
        let timeouts = self.common.timeouts;
        let backend = RedlockBackend::connect(
            &self.nodes,
            self.common.namespace,
            timeouts,
            self.retry_delay,
            (self.common.restart_guard, self.common.state_ttl),
        )
        .await?;
        BackendLock::new(backend)
            .with_lock_election()
            .with_defaults(self.common.defaults)
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

    #[tokio::test]
    async fn fewer_than_three_nodes_need_an_explicit_yes() {
        let r = reason(RedlockConfig::from_url("redlock://h1,h2"));
        assert!(
            r.contains("2 node(s)") && r.contains("allow_few_nodes=true"),
            "{r}"
        );
        RedlockConfig::from_url("redlock://h1?allow_few_nodes=true").unwrap();
        // from_urls leaves the count to connect, so the builder can allow it.
        let two = RedlockConfig::from_urls(["redis://127.0.0.1:1", "redis://127.0.0.1:2"]).unwrap();
        let refused = match two.connect().await {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected Config error, got {other:?}"),
        };
        assert!(refused.contains("allow_few_nodes"), "{refused}");
    }

    #[test]
    fn parses_nodes_credentials_and_parameters() {
        let c = RedlockConfig::from_url("redlocks://u:p%40ss@a:1,b:2,[::1]:3/4?namespace=x:&timeout=50ms&retry_delay=5ms&ttl=3s&restart_guard=3s").unwrap();
        assert_eq!(
            c.endpoints(),
            vec!["rediss://a:1/4", "rediss://b:2/4", "rediss://[::1]:3/4"]
        );
        assert!(
            c.nodes.iter().all(
                |n| n.password.as_deref() == Some("p@ss") && n.username.as_deref() == Some("u")
            )
        );
        assert_eq!(c.common.namespace, "x:");
        assert_eq!(c.common.timeouts.reply, Duration::from_millis(50));
        assert_eq!(c.retry_delay, Duration::from_millis(5));
        assert_eq!(c.common.defaults.get_ttl(), Duration::from_secs(3));
        assert_eq!(c.common.restart_guard, Some(Duration::from_secs(3)));
    }

    #[test]
    fn bad_node_lists_are_config_errors() {
        assert!(reason(RedlockConfig::from_url("redlock://a,,b")).contains("empty"));
        assert!(reason(RedlockConfig::from_url("redlock://a:1,A:1")).contains("twice"));
        assert!(reason(RedlockConfig::from_url("redlock://a,a:6379")).contains("twice"));
        assert!(reason(RedlockConfig::from_url("redis://a,b,c")).contains("redlock://h1"));
        assert!(reason(RedlockConfig::from_url("redlock://a,b,c?bogus=1")).contains("bogus"));
        assert!(
            reason(RedlockConfig::from_url("redlock://a,b,c?node_timeout=1s"))
                .contains("now called `timeout`")
        );
        assert!(reason(RedlockConfig::from_url("redlock://a:notaport,b,c")).contains("port"));
        assert!(reason(RedlockConfig::from_urls(Vec::<String>::new())).contains("no nodes"));
        assert!(reason(RedlockConfig::from_urls(["redis://a", "redis://a"])).contains("twice"));
        let r = reason(RedlockConfig::from_urls(["redis://a?namespace=x"]));
        assert!(
            r.contains("namespace") && r.contains("RedlockConfig"),
            "{r}"
        );
    }

    #[test]
    fn debug_and_errors_hide_passwords() {
        let c = RedlockConfig::from_url("redlock://:hunter2@a,b,c").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = reason(RedlockConfig::from_url("redlock://:hunter2@a,a"));
        assert!(!e.contains("hunter2"), "{e}");
    }
}
