//! Redis Sentinel launcher: a primary, one replica and three Sentinels
//! (Debian's `redis-sentinel`), each a child process on free loopback ports.

use super::process::ServerProcess;
use super::redis::{RedisOptions, RedisServer, resp_command};
use super::tls::ServerTls;
use super::{
    READY_TIMEOUT, ServerError, find_binary, free_port, retry_on_exit, url_encode, write_private,
};
use std::net::SocketAddr;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    port: u16,
    tls_port: Option<u16>,
    process: ServerProcess,
    _dir: TempDir,
}

impl SentinelProcess {
    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
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
        let binary = find_binary("redis-sentinel", "redis-sentinel")?;
        let primary = RedisServer::start_with(RedisOptions {
            password: options.password.clone(),
            tls: options.tls.clone(),
            ..RedisOptions::default()
        })
        .await?;
        // With TLS, replication and monitoring use the TLS port.
        let primary_port = primary.tls_port().unwrap_or(primary.port());
        let replica = RedisServer::start_with(RedisOptions {
            password: options.password.clone(),
            replica_of: Some(primary_port),
            tls: options.tls.clone(),
            ..RedisOptions::default()
        })
        .await?;
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            sentinels.push(start_sentinel(&binary, primary_port, &options).await?);
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
}

/// `SENTINEL MASTER distlock` as field/value pairs, over raw RESP (a flat
/// array of bulk strings, none holding a line break).
async fn master_state(addr: SocketAddr, password: Option<&str>) -> Option<Vec<String>> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend_from_slice(&resp_command(&["AUTH", password]));
    }
    request.extend_from_slice(&resp_command(&["SENTINEL", "MASTER", MASTER_NAME]));
    stream.write_all(&request).await.ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&reply).into_owned();
        let text = text.strip_prefix("+OK\r\n").unwrap_or(&text);
        let lines: Vec<&str> = text.split("\r\n").collect();
        if let Some(count) = lines.first().and_then(|l| l.strip_prefix('*'))
            && let Ok(count) = count.parse::<usize>()
            && lines.len() > 2 * count + 1
        {
            return Some(
                lines[1..=2 * count]
                    .iter()
                    .filter(|line| !line.starts_with('$'))
                    .map(|line| (*line).to_owned())
                    .collect(),
            );
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
}

fn field<'a>(pairs: &'a [String], name: &str) -> Option<&'a str> {
    pairs
        .chunks(2)
        .find(|pair| pair.first().is_some_and(|n| n == name))
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

async fn start_sentinel(
    binary: &std::path::Path,
    primary_port: u16,
    options: &SentinelOptions,
) -> Result<SentinelProcess, ServerError> {
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
            "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\ndir \"{dir}\"\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
             sentinel failover-timeout {MASTER_NAME} {failover}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = dir.path().display(),
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
        write_private(&config, &text)?;
        let args = vec![config.clone().into_os_string()];
        let process = ServerProcess::start("redis-sentinel", binary, args, dir.path())?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let password = options.sentinel_password.as_deref();
        process
            .wait_ready(READY_TIMEOUT, || super::redis::ping(addr, password))
            .await?;
        Ok((port, tls_port, process))
    })
    .await?;
    Ok(SentinelProcess {
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
