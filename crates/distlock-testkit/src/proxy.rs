//! A TCP proxy between one client and its server that can delay, blackhole, reset
//! or close the traffic on command.
//!
//! Every connection watches the current [`Fault`] through a `watch` channel, so a
//! new fault reaches connections that are already open at once, not only new ones.

use crate::fault::{Fault, FaultControl};
use crate::servers::ServerError;
use async_trait::async_trait;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// A fault-injecting TCP proxy on a free loopback port, forwarding to one upstream
/// address. Dropping it stops every task it runs and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: watch::Sender<SocketAddr>,
    fault: watch::Sender<Fault>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` with [`Fault::None`]. Clients connect to
    /// [`addr`](Self::addr). Must be called within a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> Result<Self, ServerError> {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST), upstream).await
    }

    /// Like [`start`](Self::start), listening on a free port of `host`: a
    /// server in a container dials the proxy at the host's own address on
    /// its network ([`Server::test_host`](crate::servers::Server::test_host)).
    pub async fn start_on(host: IpAddr, upstream: SocketAddr) -> Result<Self, ServerError> {
        let listener = TcpListener::bind((host, 0))
            .await
            .map_err(ServerError::io("bind the fault proxy"))?;
        let addr = listener
            .local_addr()
            .map_err(ServerError::io("read the fault proxy's address"))?;
        let (fault, watcher) = watch::channel(Fault::None);
        let (upstream, target) = watch::channel(upstream);
        let accept = tokio::spawn(accept_loop(listener, target, watcher));
        Ok(FaultProxy {
            addr,
            upstream,
            fault,
            accept,
        })
    }

    /// The address clients connect to instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address traffic is forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        *self.upstream.borrow()
    }

    /// Forwards the connections accepted from now on to `upstream` (those
    /// open stay with the old one): a failover's address moved to the
    /// promoted replica, as a virtual IP or a DNS name is.
    pub fn retarget(&self, upstream: SocketAddr) {
        self.upstream.send_replace(upstream);
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }
}

#[async_trait]
impl FaultControl for FaultProxy {
    async fn set_fault(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting drops the set of connection tasks, which aborts them all; dropping
        // the watch sender also wakes any pump still running.
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: watch::Receiver<SocketAddr>,
    mut fault: watch::Receiver<Fault>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // Out of file descriptors, say: back off instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                if *fault.borrow() == Fault::Reset {
                    reset(client);
                } else {
                    let upstream = *upstream.borrow();
                    connections.spawn(serve(client, upstream, fault.clone()));
                }
            }
            changed = fault.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Aborts the connection: the peer's next read fails with ConnectionReset.
fn reset(stream: TcpStream) {
    // If SO_LINGER cannot be set the drop still closes the socket, with a FIN.
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Why a pump stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The fault became Reset.
    Reset,
    /// The fault became Close.
    Close,
    /// The source closed its side and everything was forwarded.
    Eof,
    /// A socket failed, or the other pump did, or the proxy is gone.
    Broken,
}

async fn serve(client: TcpStream, upstream: SocketAddr, fault: watch::Receiver<Fault>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        // What the client would see from the server itself: a refused connection.
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // One side breaking ends the other too, instead of leaving it open forever.
    let broken = watch::Sender::new(false);
    let (to_server, to_client) = tokio::join!(
        pump(client_read, server_write, fault.clone(), &broken),
        pump(server_read, client_write, fault, &broken),
    );
    let ends = [to_server.2, to_client.2];
    let (Ok(client), Ok(server)) = (
        to_server.0.reunite(to_client.1),
        to_client.0.reunite(to_server.1),
    ) else {
        return;
    };
    if ends.contains(&End::Reset) {
        reset(client);
        reset(server);
    } else if ends.contains(&End::Close) {
        for mut stream in [client, server] {
            let _ = stream.shutdown().await;
        }
    }
}

/// Forwards bytes from `from` to `to` as the current fault says, and hands both
/// halves back when the connection should end.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    broken: &watch::Sender<bool>,
) -> (OwnedReadHalf, OwnedWriteHalf, End) {
    let mut broken_rx = broken.subscribe();
    // Chunks with their arrival time: a delayed chunk leaves at arrival + delay, so
    // delays do not add up across chunks and order is kept.
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut eof = false;
    // Close ends the connections open when it is set; one accepted after that is
    // served normally, so Close only counts once a change to it was observed.
    let mut fault_changed = false;
    let end = loop {
        let current = *fault.borrow_and_update();
        let due = match current {
            Fault::Reset => break End::Reset,
            Fault::Close if fault_changed => break End::Close,
            Fault::Blackhole => {
                queue.clear();
                None
            }
            Fault::Delay(delay) => queue.front().map(|(arrived, _)| *arrived + delay),
            _ => queue.front().map(|_| Instant::now()),
        };
        // A partitioned peer's FIN would not arrive either, so it waits out the
        // blackhole.
        if eof && queue.is_empty() && current != Fault::Blackhole {
            let _ = to.shutdown().await;
            break End::Eof;
        }
        tokio::select! {
            biased;
            changed = fault.changed() => {
                if changed.is_err() {
                    break End::Broken;
                }
                fault_changed = true;
            }
            () = until_broken(&mut broken_rx) => break End::Broken,
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                if let Some((_, chunk)) = queue.pop_front()
                    && to.write_all(&chunk).await.is_err()
                {
                    broken.send_replace(true);
                    break End::Broken;
                }
            }
            read = from.read(&mut buf), if !eof => match read {
                Ok(0) => eof = true,
                Ok(n) if current != Fault::Blackhole => {
                    queue.push_back((Instant::now(), buf[..n].to_vec()));
                }
                Ok(_) => {}
                Err(_) => {
                    broken.send_replace(true);
                    break End::Broken;
                }
            },
        }
    };
    (from, to, end)
}

/// Returns once the other pump reports the connection broken (or is gone).
async fn until_broken(broken: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send; keep it inside this function.
    let _ = broken.wait_for(|broken| *broken).await.map(|_| ());
}
