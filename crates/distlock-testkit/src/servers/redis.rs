//! Redis launcher: one node, or several independent nodes for Redlock.

use super::clock::MovableClock;
use super::placement::place_under;
use super::process::ServerProcess;
use super::server::Server;
use super::tls::ServerTls;
use super::{READY_TIMEOUT, ServerError, free_port, retry_on_exit, url_encode, write_private};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a clean shutdown may take before the server is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How a [`RedisServer`] is configured.
#[derive(Clone, Default)]
pub struct RedisOptions {
    /// Require this password (`requirepass`) from every client.
    pub password: Option<String>,
    /// Persist every write before answering (`appendonly yes`, `appendfsync always`),
    /// so data survives [`RedisServer::restart`] and even a SIGKILL of the server.
    pub aof: bool,
    /// Also listen for TLS on a second port ([`RedisServer::tls_url`]); the plain
    /// port stays for the launcher's readiness check and for test inspection.
    pub tls: Option<ServerTls>,
    /// Start as a replica of the primary at this address (`replicaof`), logging
    /// in to it with [`RedisOptions::password`].
    pub replica_of: Option<SocketAddr>,
    /// Start as a Redis Cluster node (`cluster-enabled yes`, its `nodes.conf`
    /// in the data dir so a restart keeps its identity and slots); see
    /// [`super::RedisCluster`], which joins such nodes into a cluster.
    pub cluster: bool,
    /// Run with this wall clock, which the test can move (the shim preloaded
    /// into the process; in a container, the clock's directory mounted).
    pub clock: Option<MovableClock>,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("aof", &self.aof)
            .field("tls", &self.tls)
            .field("replica_of", &self.replica_of)
            .field("cluster", &self.cluster)
            .field("clock", &self.clock)
            .finish()
    }
}

/// A `redis-server` child process on a free loopback port, in its own temp dir (or
/// in a container at its own address, see [`super::placement`]).
///
/// Without [`RedisOptions::aof`] nothing is persisted: a restart starts empty. The
/// process is killed when this value is dropped. [`Server::tls_port`] is the
/// TLS port of a server started with [`RedisOptions::tls`].
pub type RedisServer = Server<Redis>;

/// What a Redis [`Server`] adds: its password, data dir and movable clock.
pub struct Redis {
    password: Option<String>,
    data_dir: PathBuf,
    clock: Option<MovableClock>,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("data_dir", &self.data_dir)
            .field("clock", &self.clock)
            .finish()
    }
}

impl RedisServer {
    /// Starts a server with default options and waits until it answers PING.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_with(RedisOptions::default()).await
    }

    /// Starts a server with `options` and waits until it answers PING.
    pub async fn start_with(options: RedisOptions) -> Result<Self, ServerError> {
        let placement = place_under("redis", options.clock.as_ref())?;
        let binary = placement.binary("redis-server", "redis-server")?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-redis-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for redis"))?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir_all(&data_dir).map_err(ServerError::io("create redis data dir"))?;
        let config = dir.path().join("redis.conf");
        let password = options.password.as_deref();
        let (host, port, tls_port, process) = retry_on_exit(async || {
            let port = free_port()?;
            let tls_port = options.tls.as_ref().map(|_| free_port()).transpose()?;
            let mut text = config_text(placement.bind(), port, &data_dir, &options);
            if let (Some(tls), Some(tls_port)) = (&options.tls, tls_port) {
                text.push_str(&tls.redis_config(tls_port));
            }
            write_private(&config, &text)?;
            let args = vec![config.clone().into_os_string()];
            let (program, args) = match &options.clock {
                Some(clock) => clock.wrap(&binary, args),
                None => (binary.clone(), args),
            };
            let process =
                ServerProcess::start_at(&placement, "redis-server", &program, args, dir.path())?;
            let addr = SocketAddr::new(placement.host(), port);
            process
                .wait_ready(READY_TIMEOUT, || ping(addr, password))
                .await?;
            Ok((placement.host(), port, tls_port, process))
        })
        .await?;
        let password = options.password.clone();
        let clock = options.clock.clone();
        Ok(Server::new(
            host,
            (port, tls_port),
            process,
            dir,
            Redis {
                password,
                data_dir,
                clock,
            },
        ))
    }

    /// Starts `count` independent servers (as Redlock needs), each with `options`.
    pub async fn start_many(count: usize) -> Result<Vec<Self>, ServerError> {
        Self::start_many_with(count, &RedisOptions::default()).await
    }

    /// Starts `count` independent servers, each with `options`.
    pub async fn start_many_with(
        count: usize,
        options: &RedisOptions,
    ) -> Result<Vec<Self>, ServerError> {
        let mut servers = Vec::with_capacity(count);
        for _ in 0..count {
            servers.push(Self::start_with(options.clone()).await?);
        }
        Ok(servers)
    }

    /// `redis://[:password@]<host>:<port>/` (host `127.0.0.1`, or the container's
    /// address), ready for a Redis client.
    pub fn url(&self) -> String {
        match &self.kind.password {
            Some(password) => format!("redis://:{}@{}/", url_encode(password), self.addr()),
            None => format!("redis://{}/", self.addr()),
        }
    }

    /// `rediss://[:password@]<host>:<tls port>/` when the server was started
    /// with [`RedisOptions::tls`]; add `?ca=…` (and `cert=`, `key=`) to trust it.
    pub fn tls_url(&self) -> Option<String> {
        let port = self.tls_port()?;
        let addr = SocketAddr::new(self.addr().ip(), port);
        Some(match &self.kind.password {
            Some(password) => format!("rediss://:{}@{addr}/", url_encode(password)),
            None => format!("rediss://{addr}/"),
        })
    }

    /// The password clients must send, if any.
    pub fn password(&self) -> Option<&str> {
        self.kind.password.as_deref()
    }

    /// The wall clock it was started with ([`RedisOptions::clock`]), if any.
    pub fn clock(&self) -> Option<&MovableClock> {
        self.kind.clock.as_ref()
    }

    /// The directory holding the server's RDB and AOF files.
    pub fn data_dir(&self) -> &Path {
        &self.kind.data_dir
    }

    /// Shuts the server down cleanly (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }

    /// Stops the server if it runs, then starts it on the same port with the same
    /// data dir, and waits until it answers.
    pub async fn restart(&self) -> Result<(), ServerError> {
        self.stop().await;
        self.process.respawn()?;
        self.wait_ready().await
    }

    /// Like [`restart`](Self::restart), but deletes all persisted data first.
    pub async fn restart_empty(&self) -> Result<(), ServerError> {
        self.stop().await;
        std::fs::remove_dir_all(self.data_dir())
            .and_then(|()| std::fs::create_dir_all(self.data_dir()))
            .map_err(ServerError::io("wipe redis data dir"))?;
        self.process.respawn()?;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), ServerError> {
        let addr = self.addr();
        let password = self.password();
        self.process
            .wait_ready(READY_TIMEOUT, || ping(addr, password))
            .await
    }
}

fn config_text(bind: IpAddr, port: u16, data_dir: &Path, options: &RedisOptions) -> String {
    let mut text = format!(
        "port {port}\nbind {bind}\ndaemonize no\nlogfile \"\"\ndir \"{}\"\nsave \"\"\n",
        data_dir.display()
    );
    if bind.is_unspecified() {
        // In a container, clients come from outside; without this, a server with no
        // password answers them only `-DENIED`.
        text.push_str("protected-mode no\n");
    }
    if options.aof {
        text.push_str("appendonly yes\nappendfsync always\n");
    } else {
        text.push_str("appendonly no\n");
    }
    if let Some(password) = &options.password {
        // Redis config strings use C-style escapes inside double quotes.
        let quoted = password.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("requirepass \"{quoted}\"\n"));
        text.push_str(&format!("masterauth \"{quoted}\"\n"));
    }
    if options.cluster {
        text.push_str(
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 2000\n",
        );
        if options.tls.is_some() {
            // The bus and replication speak TLS too; the topology a TLS client
            // reads then names the TLS ports, a plain client the plain ones.
            text.push_str("tls-cluster yes\ntls-replication yes\n");
        }
    }
    if let Some(primary) = options.replica_of {
        text.push_str(&format!("replicaof {} {}\n", primary.ip(), primary.port()));
        if options.tls.is_some() {
            // `replica_of` is then the primary's TLS port; the replica also
            // announces its own TLS port, where Sentinel will reach it.
            text.push_str("tls-replication yes\n");
        }
    }
    text
}

/// Whether the server at `addr` answers PING with +PONG over raw RESP (a loading
/// server answers -LOADING, which counts as not ready).
pub(crate) async fn ping(addr: SocketAddr, password: Option<&str>) -> bool {
    let mut request = Vec::new();
    let mut expected_lines = 1;
    if let Some(password) = password {
        request.extend_from_slice(&resp_command(&["AUTH", password]));
        expected_lines += 1;
    }
    request.extend_from_slice(&resp_command(&["PING"]));
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(&request).await.is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 512];
    while reply.windows(2).filter(|pair| pair == b"\r\n").count() < expected_lines {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    reply.ends_with(b"+PONG\r\n")
}

pub(crate) fn resp_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}
