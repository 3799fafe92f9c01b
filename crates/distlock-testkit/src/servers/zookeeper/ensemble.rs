//! A ZooKeeper ensemble: several `QuorumPeerMain`s, one per member, each in its
//! own temp dir; in containers each member has its own address, so one can be cut
//! into a minority with [`ServerProcess::disconnect`], and natively through
//! [`PeerLinks`] when started with [`ZooKeeperEnsemble::start_partitionable`].

use super::{
    JVM_FLAGS, STOP_GRACE, ZooKeeper, ZooKeeperOptions, ZooKeeperServer, classpath,
    four_letter_word,
};
use crate::servers::links::{self, PeerLinks};
use crate::servers::process::ServerProcess;
use crate::servers::server::Server;
use crate::servers::{ServerError, free_port, place, retry_on_exit, write_private};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// How long an ensemble may take to elect its first leader.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(90);

/// A running ensemble; members are killed when it is dropped.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Vec<ZooKeeperServer>,
    // Dropped after the members, whose peers dial through them.
    links: Option<PeerLinks>,
}

/// A member's role, from `srvr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The leader.
    Leader,
    /// A follower serving clients.
    Follower,
    /// Anything else: looking for a quorum, not answering, stopped.
    NotServing,
}

impl ZooKeeperEnsemble {
    /// Starts `size` members with `options`' tick and session bounds, and waits
    /// until every one serves (a leader and followers).
    pub async fn start(size: usize, options: &ZooKeeperOptions) -> Result<Self, ServerError> {
        retry_on_exit(async || Self::start_with(size, options, None).await).await
    }

    /// Like [`start`](Self::start), with the members' quorum and election
    /// traffic through [`PeerLinks`] when they run natively, so that
    /// [`partition`](Self::partition) can cut one off its peers on loopback.
    /// Each member's configuration then names its own ports and the others'
    /// relays. A server dials back the election address a lower-numbered peer
    /// announces, its own port, so an election channel may bypass the relays:
    /// natively, a cut member can still vote and even win a vote, which the
    /// others then cannot act on (its quorum links are cut), so the majority
    /// may stay without a leader until the partition heals.
    pub async fn start_partitionable(
        size: usize,
        options: &ZooKeeperOptions,
    ) -> Result<Self, ServerError> {
        retry_on_exit(async || Self::start_with(size, options, Some(PeerLinks::new())).await).await
    }

    /// One attempt on fresh ports: a member that exits at start (a port
    /// another process took since it was picked) fails it with
    /// [`ServerError::Exited`], so that the caller tries again.
    async fn start_with(
        size: usize,
        options: &ZooKeeperOptions,
        links: Option<PeerLinks>,
    ) -> Result<Self, ServerError> {
        let mut specs = Vec::with_capacity(size);
        for id in 1..=size {
            let placement = place("zookeeper")?;
            specs.push((id, placement, free_port()?, free_port()?, free_port()?));
        }
        let own: Vec<String> = specs
            .iter()
            .map(|(id, at, _, quorum, election)| {
                format!("server.{id}={}:{quorum}:{election}", at.host())
            })
            .collect();
        // What the others call each member: its relays natively, else itself.
        let mut relayed = own.clone();
        if let Some(links) = &links {
            for (index, (id, at, _, quorum, election)) in specs.iter().enumerate() {
                if at.is_container() {
                    continue;
                }
                let quorum = links
                    .relay(index, SocketAddr::new(at.host(), *quorum))
                    .await?;
                let election = links
                    .relay(index, SocketAddr::new(at.host(), *election))
                    .await?;
                relayed[index] = format!("server.{id}={}:{quorum}:{election}", at.host());
            }
        }
        let mut members = Vec::with_capacity(size);
        for (index, (id, placement, port, _, _)) in specs.iter().enumerate() {
            let servers: Vec<&str> = (0..size)
                .map(|other| {
                    if other == index {
                        own[other].as_str()
                    } else {
                        relayed[other].as_str()
                    }
                })
                .collect();
            let java = placement.binary("java", "default-jre-headless")?;
            let dir = tempfile::Builder::new()
                .prefix("distlock-zookeeper-")
                .tempdir()
                .map_err(ServerError::io("create a temp dir for zookeeper"))?;
            let data = dir.path().join("data");
            std::fs::create_dir_all(&data).map_err(ServerError::io("create zookeeper data dir"))?;
            write_private(&data.join("myid"), &format!("{id}\n"))?;
            let config = dir.path().join("zoo.cfg");
            let text = format!(
                "{}initLimit=20\nsyncLimit=10\nstandaloneEnabled=false\n\
                 reconfigEnabled=false\nquorumListenOnAllIPs=true\n{}\n",
                super::config_text(placement.bind(), *port, &data, options),
                servers.join("\n")
            );
            write_private(&config, &text)?;
            let mut args: Vec<OsString> = JVM_FLAGS.iter().map(OsString::from).collect();
            args.extend(["-cp".into(), classpath(placement)?.into()]);
            args.push("org.apache.zookeeper.server.quorum.QuorumPeerMain".into());
            args.push(config.into());
            let name = format!("zookeeper {id}");
            let process = ServerProcess::start_at(placement, &name, &java, args, dir.path())?;
            members.push(Server::new(
                placement.host(),
                (*port, None),
                process,
                dir,
                ZooKeeper,
            ));
        }
        let ensemble = ZooKeeperEnsemble { members, links };
        for index in 0..size {
            ensemble.wait_serving(index, QUORUM_TIMEOUT).await?;
        }
        Ok(ensemble)
    }

    /// The members, in start order (member `i` has `myid` `i + 1`).
    pub fn members(&self) -> &[ZooKeeperServer] {
        &self.members
    }

    /// The connect string of the members at `indexes`, as ZooKeeper clients take it.
    pub fn connect_string(&self, indexes: &[usize]) -> String {
        indexes
            .iter()
            .filter_map(|index| self.members.get(*index))
            .map(ZooKeeperServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What member `index` says its role is.
    pub async fn mode(&self, index: usize) -> Mode {
        let Some(member) = self.members.get(index) else {
            return Mode::NotServing;
        };
        match four_letter_word(member.addr(), "srvr").await {
            Ok(text) if text.contains("Mode: leader") => Mode::Leader,
            Ok(text) if text.contains("Mode: follower") => Mode::Follower,
            _ => Mode::NotServing,
        }
    }

    /// Waits until member `index` serves clients as leader or follower; a
    /// member whose process has ended is [`ServerError::Exited`] at once.
    pub async fn wait_serving(&self, index: usize, timeout: Duration) -> Result<Mode, ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mode = self.mode(index).await;
            if mode != Mode::NotServing {
                return Ok(mode);
            }
            let member = &self.members[index];
            if !member.is_running() {
                return Err(ServerError::Exited {
                    name: format!("zookeeper member {}", index + 1),
                    status: "exited while waited for".into(),
                    log_tail: member.log_tail(10),
                });
            }
            if Instant::now() >= deadline {
                let tails: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {}:\n{}", m.addr(), m.log_tail(10)))
                    .collect();
                return Err(ServerError::NotReady {
                    name: format!("zookeeper member {}", index + 1),
                    waited: timeout,
                    log_tail: tails.join("\n"),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The index of the member that says it leads, waiting up to `timeout` for one.
    pub async fn leader(&self, timeout: Duration) -> Result<usize, ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            for index in 0..self.members.len() {
                if self.mode(index).await == Mode::Leader {
                    return Ok(index);
                }
            }
            if Instant::now() >= deadline {
                return Err(ServerError::NotReady {
                    name: "zookeeper leader".into(),
                    waited: timeout,
                    log_tail: String::new(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Restarts member `index` (stop, start, wait until it serves again).
    pub async fn restart(&self, index: usize) -> Result<(), ServerError> {
        let member = self
            .members
            .get(index)
            .ok_or_else(|| ServerError::Protocol(format!("no zookeeper member {index}")))?;
        member.process.stop(STOP_GRACE).await;
        member.process.respawn()?;
        self.wait_serving(index, QUORUM_TIMEOUT).await.map(drop)
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

    fn need(&self, index: usize) -> Result<&ZooKeeperServer, ServerError> {
        self.members
            .get(index)
            .ok_or_else(|| ServerError::Protocol(format!("no zookeeper member {index}")))
    }

    /// The address of member `index`'s client port.
    pub fn addr(&self, index: usize) -> Option<SocketAddr> {
        self.members.get(index).map(ZooKeeperServer::addr)
    }
}
