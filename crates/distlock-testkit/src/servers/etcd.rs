//! etcd launcher: one node, or a cluster whose members can be killed one by one.

use super::process::ServerProcess;
use super::tls::ServerTls;
use super::{READY_TIMEOUT, ServerError, find_binary, free_port, place, retry_on_exit};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const STOP_GRACE: Duration = Duration::from_secs(10);
/// Longest an etcdctl call may take; a paused quorum would otherwise hang it.
const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(20);
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// One etcd member (`etcd` child process) on free loopback ports, in its own temp
/// dir. Alone it is a single-node cluster; [`EtcdCluster`] holds several.
///
/// The process is killed when this value is dropped.
pub struct EtcdServer {
    name: String,
    host: IpAddr,
    client_port: u16,
    tls_port: Option<u16>,
    member_id: u64,
    process: ServerProcess,
    root_password: Mutex<Option<String>>,
    _dir: TempDir,
}

impl std::fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdServer")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("client_port", &self.client_port)
            .field("tls_port", &self.tls_port)
            .field("member_id", &self.member_id)
            .field("auth", &self.root_password().is_some())
            .field("process", &self.process)
            .finish()
    }
}

/// What one member reports about the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// The reporting member's id.
    pub member_id: u64,
    /// The id of the member it follows as leader; 0 when it knows none.
    pub leader: u64,
    /// The raft term it is in.
    pub raft_term: u64,
}

impl EtcdServer {
    /// Starts a single-node cluster and waits until `/health` reports healthy.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_one(None).await
    }

    /// Starts a single-node cluster that also serves clients over TLS on a second
    /// port ([`EtcdServer::tls_port`]); the plain port stays for the launcher's
    /// health check and for `etcdctl`.
    pub async fn start_tls(tls: &ServerTls) -> Result<Self, ServerError> {
        Self::start_one(Some(tls)).await
    }

    async fn start_one(tls: Option<&ServerTls>) -> Result<Self, ServerError> {
        let mut members = start_members(1, tls).await?;
        members
            .pop()
            .ok_or_else(|| ServerError::Protocol("etcd started no member".into()))
    }

    /// The TLS client port (`https://<host>:<port>`) of a member started
    /// with [`EtcdServer::start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The client URL, `http://<host>:<port>` (host `127.0.0.1`, or the
    /// container's address).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The address clients connect to: loopback, or the container's own.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.client_port)
    }

    /// The client port; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The member's name in the cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member's raft id, stable across restarts.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    /// Shuts the member down cleanly (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }

    /// Stops the member if it runs, then starts it with the same ports and data dir
    /// (so all data survives) and waits until it is healthy, which in a cluster
    /// needs a quorum.
    pub async fn restart(&self) -> Result<(), ServerError> {
        self.stop().await;
        self.process.respawn()?;
        self.wait_healthy().await
    }

    /// The root user's credentials once [`enable_auth`](Self::enable_auth) ran.
    pub fn credentials(&self) -> Option<(String, String)> {
        self.root_password()
            .map(|password| ("root".to_owned(), password))
    }

    /// Creates the `root` user with `password` and turns authentication on, so every
    /// client must log in from now on. Later etcdctl calls log in as root.
    pub async fn enable_auth(&self, password: &str) -> Result<(), ServerError> {
        self.etcdctl_run(&["user", "add", &format!("root:{password}")])
            .await?;
        self.etcdctl_run(&["auth", "enable"]).await?;
        self.set_root_password(password);
        Ok(())
    }

    /// An `etcdctl` command (API v3) aimed at this member, logged in as root once auth
    /// is enabled. Add the subcommand's arguments and run it.
    pub fn etcdctl(&self) -> Result<std::process::Command, ServerError> {
        let mut command = std::process::Command::new(find_binary("etcdctl", "etcd-client")?);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.url()))
            .arg("--dial-timeout=3s")
            .arg("--command-timeout=10s");
        if let Some(password) = self.root_password() {
            command.arg(format!("--user=root:{password}"));
        }
        Ok(command)
    }

    /// Runs `etcdctl <args>` against this member and returns its stdout.
    pub async fn etcdctl_run(&self, args: &[&str]) -> Result<String, ServerError> {
        let mut command = tokio::process::Command::from(self.etcdctl()?);
        command.args(args).kill_on_drop(true);
        let described = format!("etcdctl {}", args.first().copied().unwrap_or_default());
        let output = tokio::time::timeout(ETCDCTL_TIMEOUT, command.output())
            .await
            .map_err(|_| ServerError::Command {
                command: described.clone(),
                output: format!("no answer within {ETCDCTL_TIMEOUT:?}"),
            })?
            .map_err(ServerError::io(format!("run {described}")))?;
        if !output.status.success() {
            return Err(ServerError::Command {
                command: described,
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// What this member reports about itself and its leader (HTTP gateway
    /// `/v3/maintenance/status`).
    pub async fn status(&self) -> Result<MemberStatus, ServerError> {
        let (code, body) = http_request(self.addr(), "POST", "/v3/maintenance/status", "{}")
            .await
            .map_err(ServerError::io(format!(
                "status of etcd member {}",
                self.name
            )))?;
        let field = |key| json_u64(&body, key);
        match (code, field("member_id"), field("leader"), field("raftTerm")) {
            (200, Some(member_id), leader, Some(raft_term)) => Ok(MemberStatus {
                member_id,
                leader: leader.unwrap_or(0),
                raft_term,
            }),
            _ => Err(ServerError::Protocol(format!(
                "unexpected etcd status answer ({code}): {body}"
            ))),
        }
    }

    async fn wait_healthy(&self) -> Result<(), ServerError> {
        let addr = self.addr();
        self.process
            .wait_ready(READY_TIMEOUT, || healthy(addr))
            .await
    }

    fn root_password(&self) -> Option<String> {
        self.root_password
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_root_password(&self, password: &str) {
        *self
            .root_password
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(password.to_owned());
    }
}

/// An etcd cluster of independent member processes on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// Starts `size` members as one cluster and waits until each is healthy.
    pub async fn start(size: usize) -> Result<Self, ServerError> {
        Ok(EtcdCluster {
            members: start_members(size, None).await?,
        })
    }

    /// All members, in start order; indexes stay valid for the cluster's life.
    pub fn members(&self) -> &[EtcdServer] {
        &self.members
    }

    /// Member `index`, for per-member kill, pause and restart.
    pub fn member(&self, index: usize) -> Option<&EtcdServer> {
        self.members.get(index)
    }

    /// Every member's client URL.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(EtcdServer::url).collect()
    }

    /// Every member's client URL, comma-separated.
    pub fn url(&self) -> String {
        self.urls().join(",")
    }

    /// The index of the member that a running member follows as leader, provided the
    /// leader itself runs and agrees; `None` while there is no such leader (for
    /// example just after the leader was killed).
    pub async fn leader(&self) -> Option<usize> {
        for member in self.members.iter().filter(|m| m.process.is_running()) {
            let Ok(status) = member.status().await else {
                continue;
            };
            let leader = self
                .members
                .iter()
                .position(|m| m.member_id == status.leader && m.process.is_running());
            if let Some(index) = leader
                && let Ok(own) = self.members[index].status().await
                && own.leader == own.member_id
            {
                return Some(index);
            }
        }
        None
    }

    /// Waits until [`leader`](Self::leader) names a running leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<usize, ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(index) = self.leader().await {
                return Ok(index);
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {}:\n{}", m.name, m.log_tail(10)))
                    .collect();
                return Err(ServerError::NotReady {
                    name: "etcd cluster leader".into(),
                    waited: timeout,
                    log_tail: tails.join("\n"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Turns authentication on for the whole cluster, with a `root` user.
    pub async fn enable_auth(&self, password: &str) -> Result<(), ServerError> {
        let first = self
            .members
            .first()
            .ok_or_else(|| ServerError::Protocol("empty etcd cluster".into()))?;
        first.enable_auth(password).await?;
        for member in &self.members[1..] {
            member.set_root_password(password);
        }
        Ok(())
    }
}

/// Starts `size` members of one new cluster, all spawned before any is awaited
/// because each needs a quorum to report healthy. With `tls`, each member also
/// serves clients over TLS on a port of its own.
async fn start_members(
    size: usize,
    tls: Option<&ServerTls>,
) -> Result<Vec<EtcdServer>, ServerError> {
    let placements = (0..size)
        .map(|_| place("etcd"))
        .collect::<Result<Vec<_>, _>>()?;
    let binary = match placements.first() {
        Some(placement) => placement.binary("etcd", "etcd-server")?,
        None => return Ok(Vec::new()),
    };
    retry_on_exit(async || {
        let mut specs = Vec::with_capacity(size);
        for (index, placement) in placements.iter().enumerate() {
            let tls_port = tls.map(|_| free_port()).transpose()?;
            specs.push((
                format!("m{index}"),
                free_port()?,
                free_port()?,
                tls_port,
                placement,
            ));
        }
        let initial_cluster: Vec<String> = specs
            .iter()
            .map(|(name, _, peer, _, at)| {
                format!("{name}=http://{}", SocketAddr::new(at.host(), *peer))
            })
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let token = format!("distlock-{}", super::random_password());
        let mut spawned = Vec::with_capacity(size);
        for (name, client_port, peer_port, tls_port, placement) in specs {
            let dir = tempfile::Builder::new()
                .prefix("distlock-etcd-")
                .tempdir()
                .map_err(ServerError::io("create a temp dir for etcd"))?;
            let urls = |ip: IpAddr| {
                let mut client_url = format!("http://{}", SocketAddr::new(ip, client_port));
                if let Some(port) = tls_port {
                    client_url.push_str(&format!(",https://{}", SocketAddr::new(ip, port)));
                }
                let peer_url = format!("http://{}", SocketAddr::new(ip, peer_port));
                (client_url, peer_url)
            };
            let (listen_client, listen_peer) = urls(placement.bind());
            let (client_url, peer_url) = urls(placement.host());
            let args: Vec<OsString> = [
                format!("--name={name}"),
                format!("--data-dir={}", dir.path().join("data").display()),
                format!("--listen-client-urls={listen_client}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={listen_peer}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={initial_cluster}"),
                "--initial-cluster-state=new".to_owned(),
                format!("--initial-cluster-token={token}"),
                "--heartbeat-interval=100".to_owned(),
                "--election-timeout=1000".to_owned(),
            ]
            .into_iter()
            .chain(tls.map(ServerTls::etcd_flags).unwrap_or_default())
            .map(OsString::from)
            .collect();
            let process = ServerProcess::start_at(
                placement,
                &format!("etcd {name}"),
                &binary,
                args,
                dir.path(),
            )?;
            spawned.push((name, placement.host(), client_port, tls_port, process, dir));
        }
        let mut members = Vec::with_capacity(size);
        for (name, host, client_port, tls_port, process, dir) in spawned {
            let mut member = EtcdServer {
                name,
                host,
                client_port,
                tls_port,
                member_id: 0,
                process,
                root_password: Mutex::new(None),
                _dir: dir,
            };
            member.wait_healthy().await?;
            member.member_id = member.status().await?.member_id;
            members.push(member);
        }
        Ok(members)
    })
    .await
}

/// Whether `/health` on `addr` says `"health":"true"`.
async fn healthy(addr: SocketAddr) -> bool {
    match http_request(addr, "GET", "/health", "").await {
        Ok((200, body)) => body.replace(' ', "").contains("\"health\":\"true\""),
        _ => false,
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns the status code and body.
/// Times out, so a paused member cannot hang the caller.
async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "etcd did not answer"))??;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// The first `"key":"<digits>"` value in `json` (the gateway renders uint64 fields
/// as strings).
fn json_u64(json: &str, key: &str) -> Option<u64> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let rest = &json[start..];
    rest[..rest.find('"')?].parse().ok()
}

/// The process operations (`pid`, `kill`, `pause`, `resume`, `log_tail`...) are
/// those of [`ServerProcess`]; `stop` and `restart` are the server's own.
impl std::ops::Deref for EtcdServer {
    type Target = ServerProcess;
    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}
