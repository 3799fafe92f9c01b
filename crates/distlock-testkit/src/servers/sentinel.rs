//! Redis Sentinel launcher: a primary, one replica and three Sentinels
//! (Debian's `redis-sentinel`), each a child process on free loopback ports, or
//! (`DISTLOCK_LAUNCHER=docker`) each in a container of the `distlock/redis` image
//! at its own address. The Sentinels then announce the primary's container
//! address, which the host reaches over the bridge network.

use super::process::ServerProcess;
use super::redis::{RedisOptions, RedisServer};
use super::resp::query;
use super::tls::ServerTls;
use super::{
    READY_TIMEOUT, ServerError, free_port, place, retry_on_exit, url_encode, write_private,
};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tempfile::TempDir;

/// The name the Sentinels know the primary by.
pub const MASTER_NAME: &str = "distlock";

/// How the Sentinels judge the primary, and the passwords of the topology.
#[derive(Clone)]
pub struct SentinelOptions {
    /// `down-after-milliseconds`: how long the primary may stay silent before a
    /// Sentinel thinks it down. Short makes failover tests fast; long keeps a
    /// clean restart of the primary from starting a failover.
    pub down_after: Duration,
    /// `failover-timeout`.
    pub failover_timeout: Duration,
    /// The primary's and replica's `requirepass` (Sentinels log in with it).
    pub password: Option<String>,
    /// The Sentinels' own `requirepass` (they log in to each other with it).
    pub sentinel_password: Option<String>,
    /// Speak TLS everywhere: the data nodes replicate and the Sentinels monitor
    /// over their TLS ports, and [`SentinelTopology::url`] is a
    /// `rediss+sentinel://` URL of the Sentinels' TLS ports (add `?ca=…`).
    pub tls: Option<ServerTls>,
}

impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |p: &Option<String>| p.as_ref().map(|_| "<redacted>");
        f.debug_struct("SentinelOptions")
            .field("down_after", &self.down_after)
            .field("failover_timeout", &self.failover_timeout)
            .field("password", &hidden(&self.password))
            .field("sentinel_password", &hidden(&self.sentinel_password))
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            down_after: Duration::from_secs(5),
            failover_timeout: Duration::from_secs(10),
            password: None,
            sentinel_password: None,
            tls: None,
        }
    }
}

/// One `redis-sentinel` process.
#[derive(Debug)]
pub struct SentinelProcess {
    host: IpAddr,
    port: u16,
    tls_port: Option<u16>,
    process: ServerProcess,
    _dir: TempDir,
}

impl SentinelProcess {
    /// The address clients dial: loopback, or the container's own.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The loopback address of its TLS port, when started with TLS.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_port
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Its process, to kill or pause it.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

/// A primary with one replica, watched by three Sentinels with quorum 2. The
/// processes are killed when this value is dropped.
#[derive(Debug)]
pub struct SentinelTopology {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<SentinelProcess>,
    options: SentinelOptions,
}

impl SentinelTopology {
    /// Starts the primary, its replica and three Sentinels, and waits until each
    /// answers PING. [`SentinelTopology::settled`] waits for the Sentinels to
    /// know each other, which a failover needs.
    pub async fn start(options: SentinelOptions) -> Result<Self, ServerError> {
        let primary = RedisServer::start_with(RedisOptions {
            password: options.password.clone(),
            tls: options.tls.clone(),
            ..RedisOptions::default()
        })
        .await?;
        // With TLS, replication and monitoring use the TLS port.
        let primary_addr = SocketAddr::new(
            primary.addr().ip(),
            primary.tls_port().unwrap_or(primary.port()),
        );
        let replica = RedisServer::start_with(RedisOptions {
            password: options.password.clone(),
            replica_of: Some(primary_addr),
            tls: options.tls.clone(),
            ..RedisOptions::default()
        })
        .await?;
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            sentinels.push(start_sentinel(primary_addr, &options).await?);
        }
        Ok(SentinelTopology {
            primary,
            replica,
            sentinels,
            options,
        })
    }

    /// `redis+sentinel://[:password@]127.0.0.1:<s1>,…/distlock[?sentinel_password=…]`,
    /// ready for a lock client.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| s.tls_addr().unwrap_or(s.addr()).to_string())
            .collect();
        let scheme = match self.options.tls {
            Some(_) => "rediss",
            None => "redis",
        };
        let login = match &self.options.password {
            Some(password) => format!(":{}@", url_encode(password)),
            None => String::new(),
        };
        let query = match &self.options.sentinel_password {
            Some(password) => format!("?sentinel_password={}", url_encode(password)),
            None => String::new(),
        };
        format!(
            "{scheme}+sentinel://{login}{}/{MASTER_NAME}{query}",
            hosts.join(",")
        )
    }

    /// The server started as primary (after a failover, it may be a replica).
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The server started as replica (after a failover, it may be the primary).
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The three Sentinels.
    pub fn sentinels(&self) -> &[SentinelProcess] {
        &self.sentinels
    }

    /// Waits (bounded) until every Sentinel knows the replica and the two other
    /// Sentinels, as an election needs.
    pub async fn settled(&self) -> Result<(), ServerError> {
        for sentinel in &self.sentinels {
            let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
            loop {
                if let Some(state) =
                    master_state(sentinel.addr(), self.options.sentinel_password.as_deref()).await
                    && field(&state, "num-slaves") == Some("1")
                    && field(&state, "num-other-sentinels") == Some("2")
                {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(ServerError::NotReady {
                        name: "redis-sentinel".into(),
                        waited: READY_TIMEOUT,
                        log_tail: sentinel.process.log_tail(20),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The primary the Sentinels name now (`SENTINEL GET-MASTER-ADDR-BY-NAME`),
    /// from the first Sentinel that answers; `None` if none does.
    pub async fn named_primary(&self) -> Option<SocketAddr> {
        let password = self.options.sentinel_password.as_deref();
        for sentinel in &self.sentinels {
            let args = ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME];
            if let Some(reply) = query(sentinel.addr(), password, &args).await
                && let [ip, port] = reply.as_slice()
                && let (Ok(ip), Ok(port)) = (ip.parse(), port.parse())
            {
                return Some(SocketAddr::new(ip, port));
            }
        }
        None
    }

    /// `SENTINEL FAILOVER`: the first Sentinel promotes a replica without
    /// waiting for the primary to fail (it answers at once; the promotion follows).
    pub async fn force_failover(&self) -> Result<(), ServerError> {
        let sentinel = self.sentinels.first().ok_or(ServerError::NotRunning {
            name: "redis-sentinel".into(),
        })?;
        let password = self.options.sentinel_password.as_deref();
        let args = ["SENTINEL", "FAILOVER", MASTER_NAME];
        match query(sentinel.addr(), password, &args).await.as_deref() {
            Some([ok]) if ok == "OK" => Ok(()),
            other => Err(ServerError::Command {
                command: "SENTINEL FAILOVER".into(),
                output: format!("{other:?}"),
            }),
        }
    }

    /// Waits (bounded) until the primary reports its replica `online`: past the
    /// first sync, so a write the replica acknowledges is on it.
    pub async fn replica_online(&self) -> Result<(), ServerError> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let password = self.options.password.as_deref();
        loop {
            let info = query(self.primary.addr(), password, &["INFO", "replication"]).await;
            if info.is_some_and(|info| info.iter().any(|text| text.contains("state=online"))) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ServerError::NotReady {
                    name: "redis replica".into(),
                    waited: READY_TIMEOUT,
                    log_tail: self.replica.log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `SENTINEL MASTER distlock` as field/value pairs.
async fn master_state(addr: SocketAddr, password: Option<&str>) -> Option<Vec<String>> {
    query(addr, password, &["SENTINEL", "MASTER", MASTER_NAME])
        .await
        .filter(|pairs| pairs.len() % 2 == 0)
}

fn field<'a>(pairs: &'a [String], name: &str) -> Option<&'a str> {
    pairs
        .chunks(2)
        .find(|pair| pair.first().is_some_and(|n| n == name))
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

async fn start_sentinel(
    primary: SocketAddr,
    options: &SentinelOptions,
) -> Result<SentinelProcess, ServerError> {
    let placement = place("redis")?;
    let binary = placement.binary("redis-sentinel", "redis-sentinel")?;
    let dir = tempfile::Builder::new()
        .prefix("distlock-sentinel-")
        .tempdir()
        .map_err(ServerError::io("create a temp dir for redis-sentinel"))?;
    // Sentinel rewrites its config file, so it lives in the writable temp dir.
    let config = dir.path().join("sentinel.conf");
    let (port, tls_port, process) = retry_on_exit(async || {
        let port = free_port()?;
        let tls_port = options.tls.as_ref().map(|_| free_port()).transpose()?;
        let mut text = format!(
            "port {port}\nbind {bind}\ndaemonize no\nlogfile \"\"\ndir \"{dir}\"\n\
             sentinel monitor {MASTER_NAME} {primary_ip} {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
             sentinel failover-timeout {MASTER_NAME} {failover}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            bind = placement.bind(),
            dir = dir.path().display(),
            primary_ip = primary.ip(),
            primary_port = primary.port(),
            down = options.down_after.as_millis(),
            failover = options.failover_timeout.as_millis(),
        );
        if let (Some(tls), Some(tls_port)) = (&options.tls, tls_port) {
            // Its certificate also serves as the client one towards the data
            // nodes, which it reaches over TLS.
            text.push_str(&tls.redis_config(tls_port));
            text.push_str("tls-replication yes\n");
        }
        if let Some(password) = &options.password {
            text.push_str(&format!(
                "sentinel auth-pass {MASTER_NAME} {}\n",
                quoted(password)
            ));
        }
        if let Some(password) = &options.sentinel_password {
            let password = quoted(password);
            text.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        if placement.is_container() {
            // Clients come from outside the container; without a password a
            // protected Sentinel would refuse them.
            text.push_str("protected-mode no\n");
        }
        write_private(&config, &text)?;
        let args = vec![config.clone().into_os_string()];
        let process =
            ServerProcess::start_at(&placement, "redis-sentinel", &binary, args, dir.path())?;
        let addr = SocketAddr::new(placement.host(), port);
        let password = options.sentinel_password.as_deref();
        process
            .wait_ready(READY_TIMEOUT, || super::redis::ping(addr, password))
            .await?;
        Ok((port, tls_port, process))
    })
    .await?;
    Ok(SentinelProcess {
        host: placement.host(),
        port,
        tls_port,
        process,
        _dir: dir,
    })
}

/// A Redis config string: double quotes with C-style escapes.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
