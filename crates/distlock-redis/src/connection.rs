//! Reaching one Redis server: its address and credentials, and a command
//! connection that is made again whenever it may be broken.
//!
//! Like the `redis` crate's `ConnectionManager` the connection reconnects after
//! the server restarts, but it also drops the connection after a timeout: the
//! crate keeps a timed-out request's slot in its pipeline, so if that reply never
//! arrives (the request was lost) every later reply would be matched to the
//! wrong request. Timeouts are per call, so `WAIT` can be given longer than a
//! script.

use crate::error::CommandError;
use distlock_core::LockError;
use distlock_core::toolkit::CancelGuard;
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo};
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

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
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
    pub resp3: bool,
}

impl std::fmt::Debug for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAddress")
            .field("endpoint", &self.endpoint())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl ServerAddress {
    pub fn new(host: &str, port: u16) -> Self {
        ServerAddress {
            host: host.to_owned(),
            port,
            tls: false,
            insecure: false,
            username: None,
            password: None,
            db: 0,
            resp3: false,
        }
    }

    /// `redis://host:port/db` (or `rediss://`), never with credentials.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
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
        let addr = if self.tls {
            if !cfg!(feature = "tls") {
                return Err(LockError::config(
                    backend,
                    format!(
                        "{} needs TLS: enable the `tls` feature of distlock-redis",
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
        let protocol = match self.resp3 && !pubsub {
            true => ProtocolVersion::RESP3,
            false => ProtocolVersion::RESP2,
        };
        let mut login = RedisConnectionInfo::default()
            .set_db(self.db)
            .set_protocol(protocol);
        if let Some(user) = &self.username {
            login = login.set_username(user);
        }
        if let Some(password) = &self.password {
            login = login.set_password(password);
        }
        let info = addr
            .into_connection_info()
            .map(|info| info.set_redis_settings(login));
        info.and_then(redis::Client::open)
            .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())))
    }
}

/// How long to wait for a connection, and for each reply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
}

/// One server's command connection.
pub(crate) struct Connection {
    client: redis::Client,
    connect_timeout: Duration,
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Serialises connection attempts, so a burst of calls makes one connection.
    connecting: tokio::sync::Mutex<u64>,
}

impl Connection {
    pub fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Connection {
            client,
            connect_timeout,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(0),
        }
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current connection, or a new one; the flag says it is new.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection, bool), CommandError> {
        if let Some((generation, conn)) = self.cached() {
            return Ok((generation, conn, false));
        }
        let mut generation = self.connecting.lock().await;
        if let Some((generation, conn)) = self.cached() {
            return Ok((generation, conn, false));
        }
        // Our own timeouts apply per call; the crate's would leave poisoned slots.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let conn = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| CommandError::Timeout(self.connect_timeout))??;
        *generation += 1;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((*generation, conn.clone()));
        Ok((*generation, conn, true))
    }

    /// Forgets the connection of `generation` (if it is still the current one), so
    /// that the next call connects afresh.
    fn discard(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
        }
    }

    /// Runs `request` on the connection, connecting first if needed, and gives up
    /// after `budget` (connecting has its own timeout on top).
    ///
    /// A connection that died while idle (server restart, the server's idle
    /// `timeout`, a proxy) fails its next request at once; that request is tried
    /// once more on a new connection. Every request of the protocol is safe to
    /// repeat even if the first one did reach the server: the acquire script
    /// recognises its own owner value, renew and the fence raise are idempotent,
    /// and a repeated release can only report the lock as not held.
    pub async fn call<T, F, Fut>(&self, budget: Duration, request: F) -> Result<T, CommandError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        let (generation, conn, fresh) = self.connection().await?;
        match self.run(budget, generation, conn, &request).await {
            Err(CommandError::Redis(e)) if !fresh && e.is_connection_dropped() => {
                let (generation, conn, _) = self.connection().await?;
                self.run(budget, generation, conn, &request).await
            }
            outcome => outcome,
        }
    }

    async fn run<T, F, Fut>(
        &self,
        budget: Duration,
        generation: u64,
        conn: MultiplexedConnection,
        request: &F,
    ) -> Result<T, CommandError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, CommandError>>,
    {
        // A caller that gives up mid-request leaves the same dangling slot as a
        // timeout: the connection is discarded unless the request finished cleanly.
        let unfinished = CancelGuard::new(generation, |generation| {
            self.discard(generation);
            None
        });
        let outcome = match tokio::time::timeout(budget, request(conn)).await {
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
