//! NATS launcher: one `nats-server` with JetStream on, its store in the server's
//! temp dir, so a restart keeps every stream (and with them the lock tokens);
//! or a [`NatsCluster`], several such servers routed into one JetStream cluster.

use super::process::ServerProcess;
use super::server::Server;
use super::{READY_TIMEOUT, ServerError, free_port, place, retry_on_exit};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const STOP_GRACE: Duration = Duration::from_secs(10);

/// One `nats-server -js` on a free loopback port (or in a container). The
/// process is killed when this value is dropped.
pub type NatsServer = Server<Nats>;

/// What a NATS [`Server`] adds: its server name, as JetStream reports a
/// stream's leader, and its HTTP monitoring port (`/varz`).
#[derive(Debug)]
pub struct Nats {
    name: String,
    monitor: u16,
}

impl NatsServer {
    /// Starts the server and waits until it greets clients with JetStream on.
    pub async fn start() -> Result<Self, ServerError> {
        let mut servers = start_servers(1).await?;
        servers
            .pop()
            .ok_or_else(|| ServerError::Protocol("no nats-server started".into()))
    }

    /// The server's name (`-n`), which JetStream gives as a stream's leader.
    pub fn name(&self) -> &str {
        &self.kind.name
    }

    /// The client URL, `nats://<host>:<port>`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr())
    }

    /// The HTTP monitoring address, whose `/varz` has the server's counters
    /// (`in_msgs`: every message clients sent it).
    pub fn monitor_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr().ip(), self.kind.monitor)
    }

    /// The counter `field` of the server's `/varz` (`in_msgs`,
    /// `subscriptions`, ...), `None` when it cannot be read.
    pub async fn varz_count(&self, field: &str) -> Option<u64> {
        varz_count(&varz(self.monitor_addr()).await?, field)
    }

    /// Shuts the server down cleanly (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }

    /// Stops the server if it runs, then starts it on the same port and store.
    pub async fn restart(&self) -> Result<(), ServerError> {
        let addr = self.addr();
        self.process
            .restart(STOP_GRACE, READY_TIMEOUT, || ready(addr))
            .await
    }
}

/// A JetStream cluster of `nats-server`s, each with its own store, routed to
/// one another (in containers, each at its own address on the run's network,
/// so that one can be cut off with [`disconnect`](ServerProcess::disconnect)).
#[derive(Debug)]
pub struct NatsCluster {
    servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` servers as one cluster and waits until each greets
    /// clients with JetStream on and the cluster places a stream on all `size`
    /// of them (every server has joined the JetStream meta group).
    pub async fn start(size: usize) -> Result<Self, ServerError> {
        Ok(NatsCluster {
            servers: start_servers(size).await?,
        })
    }

    /// All servers, in start order; indexes stay valid for the cluster's life.
    pub fn servers(&self) -> &[NatsServer] {
        &self.servers
    }

    /// The index of the server named `name` (a stream's leader, as JetStream reports it).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|server| server.name() == name)
    }

    /// The index of the server that leads stream `stream` (a KV bucket's is
    /// `KV_<bucket>`), asked of the running servers; `None` while it has no
    /// leader (its only server is down) or no server answers.
    pub async fn stream_leader(&self, stream: &str) -> Option<usize> {
        for server in self.servers.iter().filter(|s| s.is_running()) {
            let api = format!("STREAM.INFO.{stream}");
            let Some(reply) = jetstream_request(server.addr(), &api, "").await else {
                continue;
            };
            let leader = reply
                .split_once("\"leader\":\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(name, _)| name.to_owned());
            if let Some(index) = leader.and_then(|name| self.index_of(&name)) {
                return Some(index);
            }
        }
        None
    }

    /// The client URL of the servers `which` selects, `nats://h1:p1,h2:p2`.
    pub fn url_of(&self, which: impl Fn(usize) -> bool) -> String {
        let addrs: Vec<String> = (self.servers.iter().enumerate())
            .filter(|(index, _)| which(*index))
            .map(|(_, server)| server.addr().to_string())
            .collect();
        format!("nats://{}", addrs.join(","))
    }
}

/// Starts `size` servers: one alone, or a cluster whose servers route to one
/// another, all spawned before any is awaited (a cluster elects its JetStream
/// meta leader only once a majority runs).
async fn start_servers(size: usize) -> Result<Vec<NatsServer>, ServerError> {
    let placements = (0..size)
        .map(|_| place("nats"))
        .collect::<Result<Vec<_>, _>>()?;
    let binary = match placements.first() {
        Some(placement) => placement.binary("nats-server", "nats-server")?,
        None => return Ok(Vec::new()),
    };
    retry_on_exit(async || {
        let specs = (placements.iter())
            .map(|placement| Ok((placement, free_port()?, free_port()?, free_port()?)))
            .collect::<Result<Vec<_>, ServerError>>()?;
        let routes: Vec<String> = (specs.iter())
            .map(|(at, _, route, _)| format!("nats://{}", SocketAddr::new(at.host(), *route)))
            .collect();
        let mut spawned = Vec::with_capacity(size);
        for (index, (placement, port, route, monitor)) in specs.into_iter().enumerate() {
            let dir = tempfile::Builder::new()
                .prefix("distlock-nats-")
                .tempdir()
                .map_err(ServerError::io("create a temp dir for nats-server"))?;
            // A fixed name per server: JetStream keeps its streams under it across restarts.
            let name = match size {
                1 => "distlock-nats".to_owned(),
                _ => format!("distlock-nats-{index}"),
            };
            let mut args: Vec<OsString> = vec![
                "-js".into(),
                "-sd".into(),
                dir.path().join("jetstream").into(),
                "-a".into(),
                placement.bind().to_string().into(),
                "-p".into(),
                port.to_string().into(),
                "-n".into(),
                name.clone().into(),
                // The server's own counters (`/varz`), which benchmarks read.
                "-m".into(),
                monitor.to_string().into(),
            ];
            if size > 1 {
                let listen = SocketAddr::new(placement.bind(), route);
                args.extend(
                    [
                        "--cluster_name".to_owned(),
                        "distlock".to_owned(),
                        "--cluster".to_owned(),
                        format!("nats://{listen}"),
                        "--routes".to_owned(),
                        routes.join(","),
                    ]
                    .map(OsString::from),
                );
            }
            let process = ServerProcess::start_at(placement, &name, &binary, args, dir.path())?;
            spawned.push((placement.host(), port, process, dir, Nats { name, monitor }));
        }
        let mut servers = Vec::with_capacity(size);
        for (host, port, process, dir, kind) in spawned {
            let addr = SocketAddr::new(host, port);
            process.wait_ready(READY_TIMEOUT, || ready(addr)).await?;
            servers.push(Server::new(host, (port, None), process, dir, kind));
        }
        if let Some(first) = servers.first().filter(|_| size > 1) {
            let addr = first.addr();
            first
                .wait_ready(READY_TIMEOUT, || cluster_places(addr, size))
                .await?;
        }
        Ok(servers)
    })
    .await
}

/// Whether the server at `addr` sends its greeting with JetStream on: the
/// `INFO {…}` line a NATS server writes first to every client.
async fn ready(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut greeting = Vec::new();
    let mut buf = [0u8; 1024];
    while !greeting.ends_with(b"\r\n") && greeting.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => greeting.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
    let text = String::from_utf8_lossy(&greeting);
    text.starts_with("INFO ") && text.contains("\"jetstream\":true")
}

/// Whether the cluster that `addr` is a server of places a stream on `size`
/// servers: a probe stream of `size` replicas is created, then deleted. Only
/// once every server has joined the JetStream meta group does that work.
async fn cluster_places(addr: SocketAddr, size: usize) -> bool {
    let config = format!(
        "{{\"name\":\"distlock-ready\",\"subjects\":[\"distlock.ready.probe\"],\
         \"num_replicas\":{size},\"storage\":\"memory\"}}"
    );
    let created = jetstream_request(addr, "STREAM.CREATE.distlock-ready", &config).await;
    created.is_some_and(|reply| !reply.contains("\"error\""))
        && jetstream_request(addr, "STREAM.DELETE.distlock-ready", "")
            .await
            .is_some_and(|reply| reply.contains("\"success\":true"))
}

/// The reply to one JetStream API request `$JS.API.<api>` with `payload`, over
/// the raw client protocol; `None` without one within 2 s (no responders: no
/// meta leader yet).
async fn jetstream_request(addr: SocketAddr, api: &str, payload: &str) -> Option<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request = format!(
            "CONNECT {{\"verbose\":false,\"headers\":true,\"no_responders\":true}}\r\n\
             SUB distlock.ready 1\r\nPUB $JS.API.{api} distlock.ready {}\r\n{payload}\r\n",
            payload.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.ok().filter(|n| *n > 0)?;
            seen.extend_from_slice(buf.get(..n).unwrap_or_default());
            let text = String::from_utf8_lossy(&seen);
            // The INFO banner, then `MSG distlock.ready 1 N` and the reply (a
            // no-responders status comes as `HMSG`, a refusal as `-ERR`).
            if text.contains("HMSG") || text.contains("-ERR") || seen.len() > 64 * 1024 {
                return None;
            }
            if let Some((_, reply)) = text.split_once("\nMSG ")
                && let Some((_, body)) = reply.split_once("\r\n")
                && body.ends_with("}\r\n")
            {
                return Some(body.to_owned());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

/// The `/varz` of the server whose monitoring port is at `monitor` (its
/// counters and version, as JSON).
pub async fn varz(monitor: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(monitor).await.ok()?;
    let request = format!("GET /varz HTTP/1.0\r\nHost: {monitor}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.ok()?;
    Some(reply)
}

/// The counter `field` of a `/varz` reply.
pub fn varz_count(varz: &str, field: &str) -> Option<u64> {
    let (_, after) = varz.split_once(&format!("\"{field}\":"))?;
    let digits: String = after
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
