//! `RedisConfig`: one Redis server (or a Sentinel-found primary, or a Cluster),
//! from a struct or a URL. The one reader of `redis://`, `rediss://` (and
//! their `+sentinel` and `+cluster` forms), `redlock://` and `redlocks://` URLs
//! is in `servers.rs`.

use crate::address::{DEFAULT_PORT, ServerAddress};
use crate::backend::{RedisBackend, RedisLock};
use crate::error::BACKEND;
use crate::fence::RedisFence;
use crate::replicas::ReplicaAck;
pub(crate) use common::{Common, check_timeout};
use distlock_core::adapter::BackendLock;
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, LockError};
pub(crate) use servers::{Schemes, read_servers};
use std::time::Duration;

/// Settings for [`RedisLock`]. Build it with [`RedisConfig::from_url`] or
/// [`RedisConfig::new`] and the setters, then [`RedisConfig::connect`].
///
/// URL form:
/// `redis://[user[:password]@]host[:port][/db][?param=value&...]`, or
/// `rediss://` for TLS. Parameters: `namespace` (default `distlock:`), the
/// acquire defaults `ttl`, `wait`, `renewal`, `max_hold`, `min_hold` (see
/// [`RedisConfig::defaults`]), `connect_timeout` (`5s`), `timeout` (per reply, `5s`),
/// `restart_guard` (off; see [`RedisConfig::restart_guard`]), `state_ttl`
/// (`24h`, at least `2s`; see [`RedisConfig::state_ttl`]), `wait_replicas` and `wait_timeout` (see [`RedisConfig::wait_for_replicas`]),
/// `fair=true` (waiters served in arrival order; see [`RedisConfig::fair`]),
/// `protocol` (`resp2`/`resp3`), `insecure=true` (`rediss://` without
/// certificate checks), and for `rediss://` `ca` (the CA certificate to trust
/// instead of the system roots), `cert` and `key` (a client certificate), all
/// PEM file paths read when the URL is parsed. Unknown parameters are an error,
/// so typos do not go unseen.
///
/// Through Sentinel:
/// `redis+sentinel://[user[:password]@]s1[:26379],s2,…/<master-name>[?db=N&…]`
/// (`rediss+sentinel://` for TLS): the hosts are Sentinels, the path the name
/// they monitor the primary by, the userinfo the data nodes' login, and
/// `sentinel_user`/`sentinel_password` the Sentinels' own. Every connection
/// asks the Sentinels for the primary, so the client follows failovers.
///
/// A Redis Cluster: `redis+cluster://[user[:password]@]n1[:6379],n2,…[?…]`
/// (`rediss+cluster://` for TLS): the hosts are seeds for the slot map, each
/// lock goes to the primary of its slot, and the parameters are those of
/// `redis://` (`restart_guard` excepted; database 0 only).
///
/// `Debug` never shows the password.
///
/// ```
/// use distlock_core::toolkit::Timeouts;
/// use distlock_redis::RedisConfig;
/// use std::time::Duration;
/// let config = RedisConfig::from_url("redis://:s3cret@localhost:6379/2?namespace=app:&ttl=10s")?
///     .timeouts(Timeouts::new(Duration::from_secs(5), Duration::from_secs(2)));
/// assert_eq!(config.endpoint(), "redis://localhost:6379/2");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub(crate) server: ServerAddress,
    common: Common,
    replicas: Option<ReplicaAck>,
    fair: bool,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self::new("127.0.0.1", DEFAULT_PORT)
    }
}

impl RedisConfig {
    /// The default time to wait for a connection: 5 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default time to wait for each reply: 5 s. Waiting for a held lock never
    /// blocks on the server, so this does not limit how long `acquire` may wait.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A server at `host:port`, database 0, no TLS, no credentials.
    pub fn new(host: &str, port: u16) -> Self {
        RedisConfig {
            server: ServerAddress::new(host, port),
            common: Common::new(Self::DEFAULT_TIMEOUT),
            replicas: None,
            fair: false,
        }
    }

    /// Parses a `redis://`, `rediss://` or `redis+sentinel://` URL (see the type
    /// docs for parameters).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let (mut url, mut servers) = read_servers(BACKEND, url, Schemes::Redis)?;
        let mut config = RedisConfig {
            server: servers
                .pop()
                .ok_or_else(|| url.error("the URL names no host"))?,
            ..Self::default()
        };
        config.common.read(&mut url)?;
        let wait_replicas = url.parse_param::<u32>("wait_replicas", "a replica count")?;
        let wait_timeout = url.duration("wait_timeout")?;
        config.fair = url.bool("fair")?.unwrap_or(false);
        url.finish()?;
        match (wait_replicas, wait_timeout) {
            (Some(n), timeout) => {
                config = config.wait_for_replicas(n, timeout.unwrap_or(Duration::from_millis(100)));
            }
            (None, Some(_)) => {
                return Err(url.error("wait_timeout without wait_replicas; add wait_replicas=N"));
            }
            (None, None) => {}
        }
        config.validate()?;
        Ok(config)
    }

    /// The server your application's `redis::Client` reaches, with its login,
    /// database, protocol and TLS (certificates included); everything else is
    /// this config's default, set with the other setters.
    ///
    /// distlock does not share the client's connections: from its connection
    /// info it opens its own, exactly these: one multiplexed command
    /// connection per [`RedisLock`] (replaced, never reused, after a reply
    /// times out, so a late reply cannot answer the next request), and, once
    /// a waiter or a held lease needs it, one RESP2 pub/sub connection
    /// that subscribes to the wake-up channels of the names waited for. Your
    /// client and its connections are left as they are.
    ///
    /// A `redis::cluster::ClusterClient` or a `redis::sentinel::SentinelClient`
    /// cannot be taken: neither tells what it connects to (its seeds,
    /// Sentinels, login), so there is nothing to open distlock's connections
    /// from. Give their URL to [`RedisConfig::from_url`]
    /// (`redis+cluster://…`, `redis+sentinel://…`). A client on a Unix socket
    /// is refused too: this adapter speaks TCP only.
    ///
    /// ```no_run
    /// use distlock_core::{AcquireOptions, DistributedLock, LockKey};
    /// use distlock_redis::RedisConfig;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/1")?; // the app's own
    /// let lock = RedisConfig::from_client(&client)?
    ///     .namespace("shop:")
    ///     .connect()
    ///     .await?;
    /// let lease = lock.acquire(&LockKey::new("sku-42")?, &AcquireOptions::new()).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_client(client: &redis::Client) -> Result<Self, LockError> {
        let server = ServerAddress::of_client(client.get_connection_info())
            .map_err(|reason| LockError::config(BACKEND, reason))?;
        Ok(RedisConfig {
            server,
            ..Self::default()
        })
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

    /// Trusts this CA certificate (PEM) instead of the system roots (`ca=`).
    pub fn tls_ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.server.tls_files.ca = Some(pem.into());
        self
    }

    /// Presents this client certificate and key (PEM) to a server that asks for
    /// one (`cert=`, `key=`; `tls-auth-clients yes`).
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.server.tls_files.cert = Some(cert_pem.into());
        self.server.tls_files.key = Some(key_pem.into());
        self
    }

    /// In Redis Cluster mode, dials `dialed` whenever the cluster announces a
    /// node at `announced` (`CLUSTER SLOTS`, `MOVED`): for a cluster behind NAT,
    /// a tunnel or a port-forward. Errors still name the announced address.
    /// Ignored outside cluster mode.
    pub fn cluster_dial_instead(mut self, announced: (&str, u16), dialed: (&str, u16)) -> Self {
        if let Some(cluster) = &mut self.server.cluster {
            let announced = (announced.0.to_owned(), announced.1);
            cluster
                .dial_instead
                .push((announced, (dialed.0.to_owned(), dialed.1)));
        }
        self
    }

    /// Puts every key under this prefix (default `distlock:`). It must not contain
    /// `{` or `}`, which would move the Redis Cluster hash tag.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.common.namespace = namespace.into();
        self
    }

    /// The lock's [`distlock_core::DistributedLock::default_options`] (the URL's
    /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`).
    pub fn defaults(mut self, defaults: AcquireOptions) -> Self {
        self.common.defaults = defaults;
        self
    }

    /// How long to wait for a connection, and for each reply (default 5 s each;
    /// the `redis` crate's own reply default of 500 ms is not used).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.common.timeouts = timeouts;
        self
    }

    /// After the server lost its lock state (a restart without persistence, a
    /// restart or failover to another process), grant no lock, semaphore permit
    /// or read-write share in this namespace until `guard` has passed, so that no lease granted before can still be
    /// believed held. The server decides, by its own clock, from a marker key
    /// the acquire script keeps; set the same guard on every client of the
    /// namespace, at least the longest ttl in use (longer ttls are refused).
    /// Off by default: a server that just started refuses guarded acquires until
    /// it has been up for the guard.
    pub fn restart_guard(mut self, guard: Duration) -> Self {
        self.common.restart_guard = Some(guard);
        self
    }

    /// How long a name's state outlives its last lease (default 24 h, at least
    /// 2 s): its fence counters and queue bookkeeping expire on the server once
    /// the name has been idle (not held, nobody waiting) this long after the
    /// last lease's expiry, so a service that locks ever new names does not
    /// leave a key per name forever. Tokens still only rise: a counter that
    /// was collected starts again above the namespace's high-water key, which
    /// every grant raises and which never expires (docs/backends/redis.md has
    /// the argument). Each client applies its own `state_ttl` to what it
    /// grants and renews; give every client of a namespace the same one.
    pub fn state_ttl(mut self, state_ttl: Duration) -> Self {
        self.common.state_ttl = state_ttl;
        self
    }

    /// After each acquire, release and fenced write, waits (`WAIT`) until
    /// `replicas` replicas have the write, at most `timeout`; too few
    /// acknowledgements fail the operation with an error naming the count (an
    /// acquire is then undone, never returned as held). This narrows, but does not close, the
    /// failover window: see the crate docs.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some(ReplicaAck { replicas, timeout });
        self
    }

    /// Serves waiters in arrival order (`fair=true`): a fair lock, in the
    /// manner of Redisson's `RFairLock`. Each waiter keeps a place in a queue
    /// beside the lock key; the lock goes only to the first in line, and a
    /// waiter that vanished loses its place after its ttl (at least 300 ms, at
    /// most 5 s) without an attempt. Every client of a name must agree: a plain
    /// client ignores the queue. Not combined with `restart_guard` or
    /// `wait_replicas`, which the fair scripts do not implement. Works in
    /// Redis Cluster mode too: the queue and the waiters' channels share the
    /// lock's slot.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The server, without credentials.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    /// The key prefix.
    pub fn get_namespace(&self) -> &str {
        &self.common.namespace
    }

    fn validate(&self) -> Result<(), LockError> {
        if self.fair && (self.replicas.is_some() || self.common.restart_guard.is_some()) {
            return Err(LockError::config(
                BACKEND,
                "fair=true cannot be combined with restart_guard or wait_replicas (the fair \
                 lock's scripts do not implement them); drop one of them",
            ));
        }
        if self.server.host.is_empty() {
            return Err(LockError::config(BACKEND, "the host is empty"));
        }
        self.server.tls_files.validate(BACKEND)?;
        if self.server.cluster.is_some() && self.common.restart_guard.is_some() {
            // The guard's marker is one key per namespace, in one slot, which
            // the acquire script of a lock in another slot may not touch.
            return Err(LockError::config(
                BACKEND,
                "restart_guard is not available in Redis Cluster mode (its marker would sit \
                 in another slot than the lock); enable persistence (appendonly yes) on \
                 every primary instead",
            ));
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
        self.common.validate(BACKEND, &RedisBackend::CAPABILITIES)
    }

    /// Connects, authenticates and loads the lock scripts, so that a wrong
    /// address, password or a server without Lua scripting fails here with a
    /// clear error rather than at the first acquire.
    pub async fn connect(self) -> Result<RedisLock, LockError> {
        self.validate()?;
        let timeouts = self.common.timeouts;
        let backend = RedisBackend::connect(
            &self.server,
            self.common.namespace,
            timeouts,
            self.replicas,
            self.common.restart_guard,
            self.fair,
            self.common.state_ttl,
        )
        .await?;
        let (semaphore, rwlock) = crate::shares::offered_on(&backend);
        BackendLock::new(backend)
            .with_semaphore(semaphore)
            .with_rwlock(rwlock)
            .with_lock_election()
            .with_defaults(self.common.defaults)
    }

    /// Connects a [`RedisFence`] to the same server: fenced writes to keys on it,
    /// with their token records under the namespace. Credentials, database,
    /// TLS, protocol and timeouts apply as for the lock; `ttl` and `restart_guard`
    /// are lock settings the fence does not use; `wait_replicas` applies to
    /// every fenced write. Loads the fence scripts, so a wrong address or
    /// password fails here.
    pub async fn connect_fence(self) -> Result<RedisFence, LockError> {
        self.validate()?;
        let (namespace, timeouts) = (self.common.namespace, self.common.timeouts);
        RedisFence::connect(&self.server, namespace, timeouts, self.replicas).await
    }
}

mod common;
mod servers;
#[cfg(test)]
mod tests;
