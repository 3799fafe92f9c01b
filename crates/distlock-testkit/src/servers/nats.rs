//! NATS launcher: one `nats-server` with JetStream on, its store in the server's
//! temp dir, so a restart keeps every stream (and with them the lock tokens).

use super::process::ServerProcess;
use super::server::Server;
use super::{READY_TIMEOUT, ServerError, free_port, place, retry_on_exit};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const STOP_GRACE: Duration = Duration::from_secs(10);

/// One `nats-server -js` on a free loopback port (or in a container). The
/// process is killed when this value is dropped.
pub type NatsServer = Server<Nats>;

/// What a NATS [`Server`] adds: its HTTP monitoring port (`/varz`).
#[derive(Debug)]
pub struct Nats {
    monitor: u16,
}

impl NatsServer {
    /// Starts the server and waits until it greets clients with JetStream on.
    pub async fn start() -> Result<Self, ServerError> {
        let placement = place("nats")?;
        let binary = placement.binary("nats-server", "nats-server")?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-nats-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for nats-server"))?;
        let store = dir.path().join("jetstream");
        let (port, monitor, process) = retry_on_exit(async || {
            let (port, monitor) = (free_port()?, free_port()?);
            let args: Vec<OsString> = vec![
                "-js".into(),
                "-sd".into(),
                store.clone().into(),
                "-a".into(),
                placement.bind().to_string().into(),
                "-p".into(),
                port.to_string().into(),
                // A fixed name: JetStream keeps its streams under it across restarts.
                "-n".into(),
                "distlock-nats".into(),
                // The server's own counters (`/varz`), which benchmarks read.
                "-m".into(),
                monitor.to_string().into(),
            ];
            let process =
                ServerProcess::start_at(&placement, "nats-server", &binary, args, dir.path())?;
            let addr = SocketAddr::new(placement.host(), port);
            process.wait_ready(READY_TIMEOUT, || ready(addr)).await?;
            Ok((port, monitor, process))
        })
        .await?;
        Ok(Server::new(
            placement.host(),
            (port, None),
            process,
            dir,
            Nats { monitor },
        ))
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
