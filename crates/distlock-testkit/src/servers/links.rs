//! The peer links of a native cluster, and cutting one member off its peers.
//!
//! On loopback no member has a network of its own to cut (in containers,
//! [`ServerProcess::disconnect`] cuts the real one), so a cluster started with
//! [`PeerLinks`] names a relay in front of every member's peer port in its
//! configuration: members dial each other through the relays, and every peer
//! connection passes one. A relay knows which member it leads to; which member
//! dialed it, it learns from the kernel: the dialing socket's inode in
//! `/proc/net/tcp{,6}`, found among the isolated member's open files.
//!
//! While a member is isolated, every connection to or from it is blackholed
//! (bytes read and dropped, as a partition drops packets, so neither side
//! learns of it before its own timeouts), and new ones are accepted and
//! blackholed too. When the partition heals, those connections are closed,
//! since the bytes they lost cannot be resent, and the members dial again.
//! Clients dial members directly, so the clients of an isolated member stay on
//! its side of the partition.

use super::ServerError;
use super::process::ServerProcess;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The member cut off, and its process id when the cut was made (a member
/// restarted since is not cut again: one fault at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Isolated {
    member: usize,
    pid: Option<u32>,
}

/// The relays of one cluster's peer ports; dropping it closes every link.
#[derive(Debug)]
pub struct PeerLinks {
    isolated: watch::Sender<Option<Isolated>>,
    relays: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for PeerLinks {
    fn default() -> Self {
        PeerLinks {
            isolated: watch::Sender::new(None),
            relays: Mutex::default(),
        }
    }
}

impl PeerLinks {
    /// Links with no relay yet and no member cut.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a relay on a free loopback port to `upstream`, a peer port of
    /// member `member`, and returns the relay's port: the one the cluster's
    /// configuration gives for that member. Must be called within a tokio runtime.
    pub async fn relay(&self, member: usize, upstream: SocketAddr) -> Result<u16, ServerError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ServerError::io("bind a peer relay"))?;
        let port = listener
            .local_addr()
            .map_err(ServerError::io("read a peer relay's address"))?
            .port();
        let isolated = self.isolated.subscribe();
        let task = tokio::spawn(accept_loop(listener, member, upstream, port, isolated));
        self.relays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
        Ok(port)
    }

    /// Cuts member `member`, whose process is `process`, off every peer.
    pub fn isolate(&self, member: usize, process: &ServerProcess) {
        let pid = process.pid();
        self.isolated.send_replace(Some(Isolated { member, pid }));
    }

    /// Ends the partition: the cut connections close, and new ones flow.
    pub fn heal(&self) {
        self.isolated.send_replace(None);
    }
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        for relay in self
            .relays
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            relay.abort();
        }
    }
}

/// Cuts member `index` off its peers: off its container's network, or through
/// its cluster's native `links` (its clients still reach it then).
pub(crate) fn partition(
    links: Option<&PeerLinks>,
    index: usize,
    process: &ServerProcess,
) -> Result<(), ServerError> {
    match links {
        Some(links) if process.container().is_none() => {
            links.isolate(index, process);
            Ok(())
        }
        _ => process.disconnect(),
    }
}

/// Undoes [`partition`].
pub(crate) fn heal(links: Option<&PeerLinks>, process: &ServerProcess) -> Result<(), ServerError> {
    match links {
        Some(links) if process.container().is_none() => {
            links.heal();
            Ok(())
        }
        _ => process.reconnect(),
    }
}

async fn accept_loop(
    listener: TcpListener,
    member: usize,
    upstream: SocketAddr,
    port: u16,
    isolated: watch::Receiver<Option<Isolated>>,
) {
    // Aborting this task drops the set, which aborts every link it runs.
    let mut links = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, from)) = accepted else {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let end = End { member, relay_port: port, dialer_port: from.port() };
                links.spawn(link(inbound, upstream, end, isolated.clone()));
            }
            Some(_) = links.join_next() => {}
        }
    }
}

/// What a link knows of its two ends.
#[derive(Debug, Clone, Copy)]
struct End {
    /// The member it leads to.
    member: usize,
    /// The relay's own port.
    relay_port: u16,
    /// The dialing socket's port.
    dialer_port: u16,
}

impl End {
    /// Whether the partition `isolated` cuts this link.
    fn cut_by(self, isolated: Option<Isolated>) -> bool {
        isolated.is_some_and(|cut| {
            cut.member == self.member
                || cut
                    .pid
                    .is_some_and(|pid| dialed_by(pid, self.dialer_port, self.relay_port))
        })
    }
}

/// One peer connection through a relay: forwarded, or blackholed while a
/// partition cuts it, and closed when that partition heals.
async fn link(
    inbound: TcpStream,
    upstream: SocketAddr,
    end: End,
    mut isolated: watch::Receiver<Option<Isolated>>,
) {
    let Ok(outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let mut cut = end.cut_by(*isolated.borrow_and_update());
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        tokio::select! {
            read = in_read.read(&mut up) => match read {
                Ok(n) if n > 0 => {
                    if !cut && out_write.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            read = out_read.read(&mut down) => match read {
                Ok(n) if n > 0 => {
                    if !cut && in_write.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            changed = isolated.changed() => {
                // A cut link lost bytes for good: any change ends it.
                if changed.is_err() || cut {
                    return;
                }
                cut = end.cut_by(*isolated.borrow_and_update());
            }
        }
    }
}

/// Whether the socket on loopback port `dialer_port` connected to `relay_port`
/// belongs to process `pid`.
fn dialed_by(pid: u32, dialer_port: u16, relay_port: u16) -> bool {
    let Some(inode) = socket_inode(dialer_port, relay_port) else {
        return false;
    };
    let wanted = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str())
    })
}

/// The inode of the TCP socket whose local port is `local` and remote port is
/// `remote`, from `/proc/net/tcp` and `/proc/net/tcp6` (a JVM's sockets are
/// IPv6 ones, even to an IPv4 address).
fn socket_inode(local: u16, remote: u16) -> Option<u64> {
    let port = |column: &str| {
        column
            .rsplit(':')
            .next()
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .into_iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let columns: Vec<&str> = line.split_whitespace().collect();
                    let (mine, theirs, inode) = (columns.get(1)?, columns.get(2)?, columns.get(9)?);
                    (port(mine)? == local && port(theirs)? == remote)
                        .then(|| inode.parse().ok())
                        .flatten()
                })
                .collect::<Vec<u64>>()
        })
        .find(|inode| *inode != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_is_found_among_its_own_process_files() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let relay_port = listener.local_addr().unwrap().port();
        let dialer = TcpStream::connect(("127.0.0.1", relay_port)).await.unwrap();
        let (_accepted, from) = listener.accept().await.unwrap();
        assert_eq!(from.port(), dialer.local_addr().unwrap().port());
        assert!(dialed_by(std::process::id(), from.port(), relay_port));
        assert!(!dialed_by(std::process::id(), from.port(), relay_port ^ 1));
    }
}
