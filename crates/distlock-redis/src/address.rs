//! Where a Redis deployment is and how to log in: one server's address, the
//! Sentinels that name its primary (`redis+sentinel://`), or the seeds of a
//! cluster (`redis+cluster://`). The connections that use them (`connection`,
//! `sentinel`, `cluster`) all build on this, so it imports none of them.

use crate::tls::TlsFiles;
use distlock_core::LockError;
use redis::{ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo};

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
    /// The TLS address of an application's own client, kept whole because its
    /// certificates cannot be read back out of it.
    pub client_tls: Option<ConnectionAddr>,
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
    /// These settings at each of `nodes` instead, for the other nodes of one
    /// deployment (a cluster's seeds, the Sentinels), which are never a
    /// cluster themselves.
    pub fn at_each<'a>(&'a self, nodes: &'a [(String, u16)]) -> impl Iterator<Item = Self> + 'a {
        nodes.iter().map(|(host, port)| ServerAddress {
            host: host.clone(),
            port: *port,
            cluster: None,
            ..self.clone()
        })
    }

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
            client_tls: None,
        }
    }

    /// The server and login of an application's `redis::Client`: host, port,
    /// TLS (with its certificates), user, password, database and protocol.
    /// Its other settings (TCP options, library name) stay with that client.
    pub fn of_client(info: &redis::ConnectionInfo) -> Result<Self, String> {
        let (host, port, tls, insecure) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host, *port, false, false),
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => (host, *port, true, *insecure),
            _ => {
                return Err(
                    "the client connects through a Unix socket, which distlock-redis \
                            does not use; give it a TCP client (redis://host:port)"
                        .into(),
                );
            }
        };
        let login = info.redis_settings();
        Ok(ServerAddress {
            tls,
            insecure,
            username: login.username().map(str::to_owned),
            password: login.password().map(str::to_owned),
            db: login.db(),
            resp3: login.protocol() != ProtocolVersion::RESP2,
            client_tls: tls.then(|| info.addr().clone()),
            ..Self::new(host, port)
        })
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
            if let Some(given) = &self.client_tls {
                return given
                    .clone()
                    .into_connection_info()
                    .map(|info| info.set_redis_settings(self.login(protocol, quiet)))
                    .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())));
            }
            ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: self.insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(self.host.clone(), self.port)
        };
        addr.into_connection_info()
            .map(|info| info.set_redis_settings(self.login(protocol, quiet)))
            .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())))
    }

    fn login(&self, protocol: ProtocolVersion, quiet: bool) -> RedisConnectionInfo {
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
        login
    }
}

/// The Sentinels that watch one primary, and how to log in to them. Their
/// password is separate from the data nodes' (`sentinel_password=`) and, like
/// it, never shown.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Sentinels {
    /// The name the Sentinels know the primary by (`sentinel monitor <name>`).
    pub master: String,
    pub nodes: Vec<(String, u16)>,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinels")
            .field("master", &self.master)
            .field("nodes", &self.nodes)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Sentinels {
    /// `s1:26379,s2:26379/<master>`, for endpoints.
    pub fn describe(&self) -> String {
        format!("{}/{}", host_list(&self.nodes), self.master)
    }
}

/// The nodes a `redis+cluster://` URL names, to learn the topology from: any
/// one that answers is enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterSeeds {
    pub nodes: Vec<(String, u16)>,
    /// Addresses to dial instead of those the cluster announces (a NAT, a
    /// tunnel, a proxy): `(announced, dialed)`.
    pub dial_instead: Vec<((String, u16), (String, u16))>,
}

impl ClusterSeeds {
    /// `h1:p1,h2:p2`, for endpoints.
    pub fn describe(&self) -> String {
        host_list(&self.nodes)
    }
}

/// `h1:p1,h2:p2`, IPv6 hosts in brackets.
fn host_list(nodes: &[(String, u16)]) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|(host, port)| match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        })
        .collect();
    nodes.join(",")
}
