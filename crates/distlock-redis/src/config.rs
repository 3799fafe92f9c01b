//! `RedisConfig`: one Redis server, from a struct or a URL.

use crate::keys::{DEFAULT_NAMESPACE, validate_namespace};
use crate::lock::{RedisBackend, RedisLock};
use crate::server::{Server, check_timeout, parse_duration};
use distlock_core::{AcquireOptions, BackendLock, LockError};
use std::time::Duration;

pub(crate) const BACKEND: &str = "redis";

/// Settings for [`RedisLock`]. Build it with [`RedisConfig::from_url`] or
/// [`RedisConfig::new`] and the setters, then [`RedisConfig::connect`].
///
/// URL form:
/// `redis://[user[:password]@]host[:port][/db][?param=value&...]`, or
/// `rediss://` for TLS (`#insecure` skips certificate checks). Parameters:
/// `namespace` (default `distlock:`), `ttl` (default ttl, `30s`),
/// `connect_timeout` (`5s`), `response_timeout` (`5s`), `wait_replicas` and
/// `wait_timeout` (see [`RedisConfig::wait_for_replicas`]), `protocol`
/// (`resp2`/`resp3`). Unknown parameters are an error, so typos do not go unseen.
///
/// `Debug` never shows the password.
///
/// ```
/// use distlock_redis::RedisConfig;
/// use std::time::Duration;
/// let config = RedisConfig::from_url("redis://:s3cret@localhost:6379/2?namespace=app:&ttl=10s")?
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(config.endpoint(), "redis://localhost:6379/2");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) server: Server,
    pub(crate) namespace: String,
    pub(crate) default_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) replicas: Option<ReplicaAck>,
}

/// How many replicas must acknowledge each acquire and release, and how long to
/// wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    /// Replicas that must acknowledge.
    pub replicas: u32,
    /// How long the server waits for them (`WAIT`'s timeout).
    pub timeout: Duration,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("replicas", &self.replicas)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self::new("127.0.0.1", crate::server::DEFAULT_PORT)
    }
}

impl RedisConfig {
    /// The default time to wait for a connection: 5 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default time to wait for each reply: 5 s. Waiting for a held lock never
    /// blocks on the server, so this does not limit how long `acquire` may wait.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

    /// A server at `host:port`, database 0, no TLS, no credentials.
    pub fn new(host: &str, port: u16) -> Self {
        RedisConfig {
            server: Server::new(host, port),
            namespace: DEFAULT_NAMESPACE.into(),
            default_ttl: AcquireOptions::DEFAULT_TTL,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
            replicas: None,
        }
    }

    /// Parses a `redis://` or `rediss://` URL (see the type docs for parameters).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let (server, params) = Server::parse(BACKEND, url)?;
        let mut config = RedisConfig {
            server,
            ..Self::default()
        };
        let (mut wait_replicas, mut wait_timeout) = (None, None);
        for (key, value) in params {
            match key.as_str() {
                "namespace" => config.namespace = value,
                "ttl" => config.default_ttl = parse_duration(BACKEND, &key, &value)?,
                "connect_timeout" => {
                    config.connect_timeout = parse_duration(BACKEND, &key, &value)?
                }
                "response_timeout" => {
                    config.response_timeout = parse_duration(BACKEND, &key, &value)?
                }
                "wait_replicas" => {
                    wait_replicas = Some(value.parse::<u32>().map_err(|_| {
                        LockError::config(
                            BACKEND,
                            format!("wait_replicas={value} is not a replica count"),
                        )
                    })?);
                }
                "wait_timeout" => wait_timeout = Some(parse_duration(BACKEND, &key, &value)?),
                _ => {
                    return Err(LockError::config(
                        BACKEND,
                        format!(
                            "unknown URL parameter `{key}`; known: namespace, ttl, connect_timeout, \
                             response_timeout, wait_replicas, wait_timeout, protocol"
                        ),
                    ));
                }
            }
        }
        match (wait_replicas, wait_timeout) {
            (Some(n), timeout) => {
                config = config.wait_for_replicas(n, timeout.unwrap_or(Duration::from_millis(100)));
            }
            (None, Some(_)) => {
                return Err(LockError::config(
                    BACKEND,
                    "wait_timeout without wait_replicas; add wait_replicas=N",
                ));
            }
            (None, None) => {}
        }
        config.validate()?;
        Ok(config)
    }

    /// Connects with this user and password (`None` for the default user).
    pub fn credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.server.username = username.map(str::to_owned);
        self.server.password = Some(password.to_owned());
        self
    }

    /// Uses database `db`.
    pub fn db(mut self, db: i64) -> Self {
        self.server.db = db;
        self
    }

    /// Connects over TLS (`rediss://`).
    pub fn tls(mut self, tls: bool) -> Self {
        self.server.tls = tls;
        self
    }

    /// Puts every key under this prefix (default `distlock:`). It must not contain
    /// `{` or `}`, which would move the Redis Cluster hash tag.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The ttl of [`crate::RedisBackend::default_options`].
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long to wait for a connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for each reply (default 5 s; the `redis` crate's own
    /// default of 500 ms is not used).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// After each acquire and release, waits (`WAIT`) until `replicas` replicas
    /// have the write, at most `timeout`; too few acknowledgements fail the
    /// operation (an acquire is then undone). This narrows, but does not close, the
    /// failover window: see the crate docs.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some(ReplicaAck { replicas, timeout });
        self
    }

    /// The server, without credentials.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    /// The key prefix.
    pub fn get_namespace(&self) -> &str {
        &self.namespace
    }

    fn validate(&self) -> Result<(), LockError> {
        validate_namespace(BACKEND, &self.namespace)?;
        check_timeout(BACKEND, "connect_timeout", self.connect_timeout)?;
        check_timeout(BACKEND, "response_timeout", self.response_timeout)?;
        if self.server.host.is_empty() {
            return Err(LockError::config(BACKEND, "the host is empty"));
        }
        if let Some(ack) = self.replicas {
            if ack.replicas == 0 {
                return Err(LockError::config(
                    BACKEND,
                    "wait_for_replicas needs at least 1 replica; leave it unset for none",
                ));
            }
            check_timeout(BACKEND, "wait timeout", ack.timeout)?;
        }
        AcquireOptions::new()
            .ttl(self.default_ttl)
            .validate(&crate::lock::capabilities())
            .map_err(|e| LockError::config(BACKEND, format!("default ttl: {e}")))
    }

    /// Connects, authenticates and loads the lock scripts, so that a wrong
    /// address, password or a server without Lua scripting fails here with a
    /// clear error rather than at the first acquire.
    pub async fn connect(self) -> Result<RedisLock, LockError> {
        self.validate()?;
        let backend = RedisBackend::connect(self).await?;
        Ok(BackendLock::new(backend))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(r: Result<RedisConfig, LockError>) -> String {
        match r {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected Config error, got {other:?}"),
        }
    }

    #[test]
    fn url_parameters_are_applied() {
        let c = RedisConfig::from_url(
            "redis://h:1/2?namespace=app:&ttl=10s&connect_timeout=1s&response_timeout=250ms&wait_replicas=1&wait_timeout=50ms",
        )
        .unwrap();
        assert_eq!(c.namespace, "app:");
        assert_eq!(c.default_ttl, Duration::from_secs(10));
        assert_eq!(c.connect_timeout, Duration::from_secs(1));
        assert_eq!(c.response_timeout, Duration::from_millis(250));
        assert_eq!(
            c.replicas,
            Some(ReplicaAck {
                replicas: 1,
                timeout: Duration::from_millis(50)
            })
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        assert!(reason(RedisConfig::from_url("redis://h?namepsace=x")).contains("namepsace"));
        assert!(reason(RedisConfig::from_url("redis://h?ttl=soon")).contains("ttl=soon"));
        assert!(reason(RedisConfig::from_url("redis://h?namespace={x}")).contains("brace"));
        assert!(
            reason(RedisConfig::from_url("redis://h?response_timeout=0s"))
                .contains("response_timeout")
        );
        assert!(
            reason(RedisConfig::from_url("redis://h?wait_timeout=1s")).contains("wait_replicas")
        );
        assert!(reason(RedisConfig::from_url("redis://h?wait_replicas=0")).contains("at least 1"));
        assert!(reason(RedisConfig::from_url("redis://h?ttl=0s")).contains("default ttl"));
    }

    #[test]
    fn debug_hides_the_password() {
        let c = RedisConfig::new("h", 1).credentials(Some("u"), "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
