//! etcd launcher: one node, or a cluster whose members can be killed one by one.

use super::server::Server;
use super::tls::ServerTls;
use super::{READY_TIMEOUT, ServerError, find_binary};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

mod cluster;
mod gateway;

pub use cluster::EtcdCluster;

use cluster::start_members;
use gateway::{healthy, http_request, json_u64};

const STOP_GRACE: Duration = Duration::from_secs(10);
/// Longest an etcdctl call may take; a paused quorum would otherwise hang it.
const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(20);

/// One etcd member (`etcd` child process) on free loopback ports, in its own temp
/// dir. Alone it is a single-node cluster; [`EtcdCluster`] holds several.
///
/// The process is killed when this value is dropped. [`Server::tls_port`] is
/// the TLS client port (`https://<host>:<port>`) of a member started with
/// [`EtcdServer::start_tls`].
pub type EtcdServer = Server<Etcd>;

/// What an etcd [`Server`] adds: the member's name and raft id, and the root
/// password once authentication is on.
pub struct Etcd {
    name: String,
    member_id: u64,
    root_password: Mutex<Option<String>>,
}

impl Etcd {
    fn new(name: String) -> Self {
        Etcd {
            name,
            member_id: 0,
            root_password: Mutex::new(None),
        }
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = self
            .root_password
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        f.debug_struct("Etcd")
            .field("name", &self.name)
            .field("member_id", &self.member_id)
            .field("auth", &auth)
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
        let mut members = start_members(1, tls, None).await?;
        members
            .pop()
            .ok_or_else(|| ServerError::Protocol("etcd started no member".into()))
    }

    /// The client URL, `http://<host>:<port>` (host `127.0.0.1`, or the
    /// container's address).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The member's name in the cluster.
    pub fn name(&self) -> &str {
        &self.kind.name
    }

    /// The member's raft id, stable across restarts.
    pub fn member_id(&self) -> u64 {
        self.kind.member_id
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
                self.name()
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
        self.kind
            .root_password
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_root_password(&self, password: &str) {
        *self
            .kind
            .root_password
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(password.to_owned());
    }
}
