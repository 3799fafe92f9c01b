//! What every single-node launcher hands out: the process, the address clients
//! dial, the scratch dir, and what the server's kind adds. Written once so the
//! Redis, etcd, ZooKeeper, MariaDB and PostgreSQL launchers only add their own parts.

use super::process::ServerProcess;
use std::net::{IpAddr, SocketAddr};
use tempfile::TempDir;

/// A launched server of kind `K` ([`super::RedisServer`], [`super::EtcdServer`],
/// [`super::ZooKeeperServer`], [`super::MariaDbServer`], [`super::PostgresServer`]):
/// a child process on a free port in its own temp dir (or in a container at its
/// own address, see [`super::placement`]).
///
/// The process is killed when this value is dropped.
pub struct Server<K> {
    host: IpAddr,
    port: u16,
    tls_port: Option<u16>,
    pub(super) process: ServerProcess,
    pub(super) kind: K,
    // Dropped after the process, which runs in it.
    _dir: TempDir,
}

impl<K> Server<K> {
    pub(super) fn new(
        host: IpAddr,
        (port, tls_port): (u16, Option<u16>),
        process: ServerProcess,
        dir: TempDir,
        kind: K,
    ) -> Self {
        Server {
            host,
            port,
            tls_port,
            process,
            kind,
            _dir: dir,
        }
    }

    /// The address clients connect to: loopback, or the container's own.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The address at which the server reaches a listener of the test
    /// process (a relay it is to dial): loopback, or the host's own on the
    /// containers' network.
    pub fn test_host(&self) -> IpAddr {
        match self.process.container() {
            Some(container) => container.gateway(),
            None => self.host,
        }
    }

    /// The client port; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, when the server serves TLS on a port of its own (Redis,
    /// etcd and ZooKeeper started with TLS).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }
}

impl<K: std::fmt::Debug> std::fmt::Debug for Server<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("kind", &self.kind)
            .field("process", &self.process)
            .finish()
    }
}

/// The process operations (`pid`, `kill`, `pause`, `resume`, `log_tail`...) are
/// those of [`ServerProcess`]; `stop` and `restart` are the server's own.
impl<K> std::ops::Deref for Server<K> {
    type Target = ServerProcess;
    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}
