//! [`EtcdCluster`]: several members started as one cluster, its leader, a
//! member cut off its peers, and the start of members itself (a single server
//! is a cluster of one). Apart from the member so that file reads as one
//! process and its `etcdctl`.

use super::{Etcd, EtcdServer};
use crate::servers::links::{self, PeerLinks};
use crate::servers::process::ServerProcess;
use crate::servers::server::Server;
use crate::servers::tls::ServerTls;
use crate::servers::{ServerError, free_port, place, retry_on_exit};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::time::Instant;

/// An etcd cluster of independent member processes on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
    // Dropped after the members, whose peers dial through them.
    links: Option<PeerLinks>,
}

impl EtcdCluster {
    /// Starts `size` members as one cluster and waits until each is healthy.
    pub async fn start(size: usize) -> Result<Self, ServerError> {
        Ok(EtcdCluster {
            members: start_members(size, None, None).await?,
            links: None,
        })
    }

    /// Like [`start`](Self::start), with the members' peer traffic through
    /// [`PeerLinks`] when they run natively, so that
    /// [`partition`](Self::partition) can cut one off its peers on loopback.
    pub async fn start_partitionable(size: usize) -> Result<Self, ServerError> {
        let links = PeerLinks::new();
        Ok(EtcdCluster {
            members: start_members(size, None, Some(&links)).await?,
            links: Some(links),
        })
    }

    /// Cuts member `index` off its peers: in a container off its network
    /// (clients lose it too); natively, started with
    /// [`start_partitionable`](Self::start_partitionable), off its peer links
    /// (its clients still reach it, on its side of the partition).
    pub fn partition(&self, index: usize) -> Result<(), ServerError> {
        links::partition(self.links.as_ref(), index, &self.need(index)?.process)
    }

    /// Ends the partition of member `index`.
    pub fn heal(&self, index: usize) -> Result<(), ServerError> {
        links::heal(self.links.as_ref(), &self.need(index)?.process)
    }

    fn need(&self, index: usize) -> Result<&EtcdServer, ServerError> {
        self.members
            .get(index)
            .ok_or_else(|| ServerError::Protocol(format!("no etcd member {index}")))
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
                .position(|m| m.member_id() == status.leader && m.process.is_running());
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
                    .map(|m| format!("--- {}:\n{}", m.name(), m.log_tail(10)))
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
/// serves clients over TLS on a port of its own. With `links` and natively,
/// members advertise a relay of `links` as their peer URL.
pub(super) async fn start_members(
    size: usize,
    tls: Option<&ServerTls>,
    links: Option<&PeerLinks>,
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
            let peer_port = free_port()?;
            let advertised = match links {
                Some(links) if !placement.is_container() => {
                    let upstream = SocketAddr::new(placement.host(), peer_port);
                    links.relay(index, upstream).await?
                }
                _ => peer_port,
            };
            specs.push((
                format!("m{index}"),
                free_port()?,
                (peer_port, advertised),
                tls_port,
                placement,
            ));
        }
        let initial_cluster: Vec<String> = specs
            .iter()
            .map(|(name, _, (_, advertised), _, at)| {
                format!("{name}=http://{}", SocketAddr::new(at.host(), *advertised))
            })
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let token = format!("distlock-{}", crate::servers::random_password());
        let mut spawned = Vec::with_capacity(size);
        for (name, client_port, peer_port, tls_port, placement) in specs {
            let dir = tempfile::Builder::new()
                .prefix("distlock-etcd-")
                .tempdir()
                .map_err(ServerError::io("create a temp dir for etcd"))?;
            let urls = |ip: IpAddr, peer_port: u16| {
                let mut client_url = format!("http://{}", SocketAddr::new(ip, client_port));
                if let Some(port) = tls_port {
                    client_url.push_str(&format!(",https://{}", SocketAddr::new(ip, port)));
                }
                let peer_url = format!("http://{}", SocketAddr::new(ip, peer_port));
                (client_url, peer_url)
            };
            let (listen_client, listen_peer) = urls(placement.bind(), peer_port.0);
            let (client_url, peer_url) = urls(placement.host(), peer_port.1);
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
            let kind = Etcd::new(name);
            let mut member = Server::new(host, (client_port, tls_port), process, dir, kind);
            member.wait_healthy().await?;
            member.kind.member_id = member.status().await?.member_id;
            members.push(member);
        }
        Ok(members)
    })
    .await
}
