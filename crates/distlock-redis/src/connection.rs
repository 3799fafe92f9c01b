//! Reaching one Redis server: its address and credentials, and a command
//! connection that is made again whenever it may be broken.
//!
//! Like the `redis` crate's `ConnectionManager` the connection reconnects after
//! the server restarts, but it also drops the connection after a timeout: the
//! crate keeps a timed-out request's slot in its pipeline, so if that reply never
//! arrives (the request was lost) every later reply would be matched to the
//! wrong request. Timeouts are per call, so `WAIT` can be given longer than a
//! script.
//!
//! Each new connection reads the server's `run_id` (`INFO server`): a
//! connection never outlives the process it reached, so a lease acquired on it
//! was granted by that process, and a later connection with another `run_id`
//! means a restarted server or a failover, which the leases must hear about.

use crate::cluster::ClusterSeeds;
use crate::error::CommandError;
use crate::sentinel::{Sentinels, Target, is_primary};
use crate::tls::TlsFiles;
use distlock_core::LockError;
use distlock_core::toolkit::CancelGuard;
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

mod command;
pub(crate) use command::CommandConn;

/// The default Redis port.
pub(crate) const DEFAULT_PORT: u16 = 6379;

/// Where one Redis server is and how to log in. Credentials leave it only into
/// the `redis` crate's client: `Debug` and [`ServerAddress::endpoint`] omit them.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ServerAddress {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Skip TLS certificate verification (`insecure=true`).
    pub insecure: bool,
    /// The CA to trust and the client certificate to present (`ca`, `cert`, `key`).
    pub tls_files: TlsFiles,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
    pub resp3: bool,
    /// Found through these Sentinels (`redis+sentinel://`): `host` and `port`
    /// are then unused, the primary's address is asked at each connect.
    pub sentinels: Option<Sentinels>,
    /// A Redis Cluster found through these seeds (`redis+cluster://`): `host`
    /// and `port` are then the first seed's.
    pub cluster: Option<ClusterSeeds>,
}

impl std::fmt::Debug for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAddress")
            .field("endpoint", &self.endpoint())
            .field("insecure", &self.insecure)
            .field("tls_files", &self.tls_files)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("resp3", &self.resp3)
            .field("sentinels", &self.sentinels)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl ServerAddress {
    pub fn new(host: &str, port: u16) -> Self {
        ServerAddress {
            host: host.to_owned(),
            port,
            tls: false,
            insecure: false,
            tls_files: TlsFiles::default(),
            username: None,
            password: None,
            db: 0,
            resp3: false,
            sentinels: None,
            cluster: None,
        }
    }

    /// `redis://host:port/db` (or `rediss://`; `redis+sentinel://s1,s2/name?db=`
    /// through Sentinel, `redis+cluster://n1,n2` for a cluster), never with
    /// credentials.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        if let Some(cluster) = &self.cluster {
            return format!("{scheme}+cluster://{}", cluster.describe());
        }
        if let Some(sentinels) = &self.sentinels {
            return format!(
                "{scheme}+sentinel://{}?db={}",
                sentinels.describe(),
                self.db
            );
        }
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}/{}", self.port, self.db)
    }

    /// The identity of the server, for finding a node listed twice.
    pub fn identity(&self) -> (String, u16) {
        (self.host.to_ascii_lowercase(), self.port)
    }

    /// The `redis` crate's client for this server. `pubsub` forces RESP2: the
    /// subscriber reads RESP2 pub/sub frames whatever protocol commands use.
    pub fn client(&self, backend: &'static str, pubsub: bool) -> Result<redis::Client, LockError> {
        let protocol = match self.resp3 && !pubsub {
            true => ProtocolVersion::RESP3,
            false => ProtocolVersion::RESP2,
        };
        let info = self.connection_info(backend, protocol, pubsub)?;
        #[cfg(feature = "tls")]
        if self.tls && self.tls_files.is_set() {
            let certificates = self.tls_files.certificates();
            return redis::Client::build_with_tls(info, certificates).map_err(|e| {
                LockError::config(backend, format!("{} (TLS files): {e}", self.endpoint()))
            });
        }
        redis::Client::open(info)
            .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())))
    }

    /// Where and how to log in, in the `redis` crate's form; the TLS files are
    /// the caller's to add. `quiet` skips `CLIENT SETINFO` for connections that
    /// only listen: their (re)connects send no command the round-trip
    /// accounting would have to explain.
    pub fn connection_info(
        &self,
        backend: &'static str,
        protocol: ProtocolVersion,
        quiet: bool,
    ) -> Result<redis::ConnectionInfo, LockError> {
        let addr = if self.tls {
            if !cfg!(feature = "tls") {
                return Err(LockError::config(
                    backend,
                    format!(
                        "{} needs TLS, which this build lacks: enable the `tls` feature of the \
                         distlock crate (or of distlock-redis when used directly)",
                        self.endpoint()
                    ),
                ));
            }
            // rustls needs a process-wide crypto provider; an application that
            // installed its own keeps it.
            #[cfg(feature = "tls")]
            let _ = rustls::crypto::ring::default_provider().install_default();
            ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: self.insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(self.host.clone(), self.port)
        };
        let mut login = RedisConnectionInfo::default()
            .set_db(self.db)
            .set_protocol(protocol);
        if quiet {
            login = login.set_skip_set_lib_name();
        }
        if let Some(user) = &self.username {
            login = login.set_username(user);
        }
        if let Some(password) = &self.password {
            login = login.set_password(password);
        }
        addr.into_connection_info()
            .map(|info| info.set_redis_settings(login))
            .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())))
    }
}

/// The server process a connection reached, as `INFO server` names it; `None`
/// when the server does not say (an ACL without `INFO`).
pub(crate) type RunId = Option<Arc<str>>;

/// One live connection and the server process it reached.
#[derive(Clone)]
pub(crate) struct Link {
    pub conn: CommandConn,
    pub run_id: RunId,
    generation: u64,
}

/// One server's command connection.
pub(crate) struct Connection {
    target: Target,
    connect_timeout: Duration,
    current: Mutex<Option<Link>>,
    /// Serialises connection attempts, so a burst of calls makes one connection.
    connecting: tokio::sync::Mutex<u64>,
    /// The `run_id` of the newest connection; notifies when the server changed.
    run_ids: watch::Sender<RunId>,
}

impl Connection {
    pub fn new(target: Target, connect_timeout: Duration) -> Self {
        Connection {
            target,
            connect_timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(0),
            run_ids: watch::Sender::new(None),
        }
    }

    /// Follows the `run_id` of the newest connection.
    pub fn run_ids(&self) -> watch::Receiver<RunId> {
        self.run_ids.subscribe()
    }

    fn cached(&self) -> Option<Link> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current connection, or a new one; the flag says it is new.
    async fn connection(&self) -> Result<(Link, bool), CommandError> {
        if let Some(link) = self.cached() {
            return Ok((link, false));
        }
        let mut generation = self.connecting.lock().await;
        if let Some(link) = self.cached() {
            return Ok((link, false));
        }
        // Our own timeouts apply per call; the crate's would leave poisoned slots.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = async {
            if let Target::Cluster(cluster) = &self.target {
                // No run_id: the connection reaches every primary.
                let conn = cluster.connect(self.connect_timeout).await?;
                return Ok((CommandConn::Cluster(conn), None));
            }
            let client = self.target.client(self.connect_timeout).await?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // Sentinel may still name a primary that was just demoted.
            if self.target.checks_role() && !is_primary(&mut conn).await? {
                return Err(CommandError::Sentinel(
                    "the node Sentinel named is not a primary (a failover is under way)".into(),
                ));
            }
            let run_id = read_run_id(&mut conn).await?;
            Ok::<_, CommandError>((CommandConn::Single(conn), run_id))
        };
        let (conn, run_id) = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| CommandError::Timeout(self.connect_timeout))??;
        *generation += 1;
        let link = Link {
            conn,
            run_id,
            generation: *generation,
        };
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(link.clone());
        // Watchers hear of a server that differs from the previous connection's;
        // the first connection has nothing to differ from.
        let first = *generation == 1;
        self.run_ids.send_if_modified(|seen| {
            let changed = !first && *seen != link.run_id;
            seen.clone_from(&link.run_id);
            changed
        });
        Ok((link, true))
    }

    /// Forgets the connection of `generation` (if it is still the current one), so
    /// that the next call connects afresh.
    fn discard(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|link| link.generation == generation)
        {
            *current = None;
        }
    }

    /// Runs `request` on the connection, as [`Connection::call_linked`] does.
    pub async fn call<T, F, Fut>(&self, budget: Duration, request: F) -> Result<T, CommandError>
    where
        F: Fn(CommandConn) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        let (value, _) = self.call_linked(budget, |link| request(link.conn)).await?;
        Ok(value)
    }

    /// Runs `request` on the connection, connecting first if needed, and gives up
    /// after `budget` (connecting has its own timeout on top). Returns the answer
    /// with the `run_id` of the server that gave it.
    ///
    /// A connection that died while idle (server restart, the server's idle
    /// `timeout`, a proxy) fails its next request at once; that request is tried
    /// once more on a new connection. Every request of the protocol is safe to
    /// repeat even if the first one did reach the server: the acquire script
    /// recognises its own owner value, renew and the fence raise are idempotent,
    /// and a repeated release can only report the lock as not held.
    pub async fn call_linked<T, F, Fut>(
        &self,
        budget: Duration,
        request: F,
    ) -> Result<(T, RunId), CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        let (link, fresh) = self.connection().await?;
        let run_id = link.run_id.clone();
        match self.run(budget, link, &request).await {
            Err(CommandError::Redis(e)) if !fresh && e.is_connection_dropped() => {
                let (link, _) = self.connection().await?;
                let run_id = link.run_id.clone();
                Ok((self.run(budget, link, &request).await?, run_id))
            }
            outcome => Ok((outcome?, run_id)),
        }
    }

    async fn run<T, F, Fut>(
        &self,
        budget: Duration,
        link: Link,
        request: &F,
    ) -> Result<T, CommandError>
    where
        F: Fn(Link) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        // A caller that gives up mid-request leaves the same dangling slot as a
        // timeout: the connection is discarded unless the request finished cleanly.
        let unfinished = CancelGuard::new(link.generation, |generation| {
            self.discard(generation);
            None
        });
        let outcome = match tokio::time::timeout(budget, request(link)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommandError::Timeout(budget)),
        };
        if !outcome
            .as_ref()
            .is_err_and(CommandError::poisons_connection)
        {
            unfinished.disarm();
        }
        outcome
    }
}

/// The `run_id` in `INFO server`. A server that refuses `INFO` (an ACL) is not an
/// error: with no `run_id` to compare, every lease is checked after a reconnect.
async fn read_run_id(conn: &mut MultiplexedConnection) -> Result<RunId, CommandError> {
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("server").query_async(conn).await;
    match info {
        Ok(info) => Ok(info_field(&info, "run_id").map(Arc::from)),
        Err(e) if e.is_io_error() || e.is_unrecoverable_error() => Err(e.into()),
        Err(e) => {
            tracing::debug!(error = %e, "INFO server refused: after a reconnect every lease is checked");
            Ok(None)
        }
    }
}

/// `name:value` from an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::info_field;

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n";
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "connected_slaves"), Some("2"));
        assert_eq!(info_field(info, "connected"), None);
    }
}
