//! Redis Cluster (`redis+cluster://`): where the connections go when the
//! lock's keys are spread over the slots of several primaries.
//!
//! The `redis` crate's cluster client does the routing: every command goes to
//! the primary of its first key's slot (a script's first `KEYS` entry), a
//! `MOVED` reply refreshes the slot map and an `ASK` reply is followed once, so
//! a resharded or failed-over slot is found again without our help. Every lock
//! script keeps all its keys, and the channel it publishes on, under one
//! `{hash tag}` (see `keys`), so each runs whole on one primary.
//!
//! What cluster mode changes elsewhere:
//! - the command connection is one `ClusterConnection` (one multiplexed
//!   connection per primary inside it), dropped after a timeout like the
//!   single-server one;
//! - wake-ups use sharded pub/sub: the release scripts `SPUBLISH` on the lock's
//!   channel, which lives in the lock's slot, and the subscriber `SSUBSCRIBE`s
//!   it through a RESP3 cluster connection that routes each channel to its
//!   slot's primary;
//! - no `run_id` is read: a connection reaches several processes. Instead,
//!   every time the subscriber connects again (a node's connection dropped:
//!   a restart, a failover), every held lease is read back (one `MGET`, split
//!   by slot), and one whose key is gone fires `lost()` at once;
//! - `WAIT` goes to every primary and the smallest count is taken, so with
//!   `wait_replicas` every primary must have that many replicas.

use crate::address::{ClusterSeeds, ServerAddress};
use crate::command::CommandConn;
use crate::error::CommandError;
use distlock_core::LockError;
use redis::cluster::{ClusterClient, ClusterClientBuilder, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ProtocolVersion, PushInfo, Value};
use std::time::Duration;
use tokio::sync::mpsc;

/// The crate does its own per-request timeout and retries inside a cluster
/// request; ours bound every call, so theirs must never fire first (a `WAIT`
/// may legitimately block for its whole timeout).
const NO_CRATE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Bounds in ms of the crate's wait before it retries a request inside the
/// connection (a slot with no reachable primary, `CLUSTERDOWN`, `TRYAGAIN`).
/// Its default waits at least 1.28 s, longer than our budget, so such a retry
/// never answers a caller; worse, while a request of a dead primary's slot
/// waits there, the crate does not send a multi-node command on the same
/// connection (`SCRIPT LOAD` after a `NOSCRIPT`, `PING`, `WAIT`, a
/// cross-slot `MGET`) until something else wakes it: it queues the per-node
/// requests without waking its own task, which runs again only when another
/// request is ready. Short waits bound that stall by `RETRY_WAIT_MAX_MS`, so a
/// dead primary cannot hold up the live ones' locks.
const RETRY_WAIT_MIN_MS: u64 = 10;
const RETRY_WAIT_MAX_MS: u64 = 100;

/// How to open connections to one cluster: the seeds' login and TLS settings,
/// checked once when the client is made so bad TLS files fail at connect time.
#[derive(Clone)]
pub(crate) struct ClusterTarget {
    backend: &'static str,
    address: ServerAddress,
    seeds: ClusterSeeds,
}

impl ClusterTarget {
    pub fn new(
        address: &ServerAddress,
        seeds: &ClusterSeeds,
        backend: &'static str,
    ) -> Result<Self, LockError> {
        let target = ClusterTarget {
            backend,
            address: address.clone(),
            seeds: seeds.clone(),
        };
        target.client(None)?;
        Ok(target)
    }

    /// The crate's client; `pushes` makes it RESP3 with its push messages
    /// (sharded pub/sub) sent there.
    fn client(
        &self,
        pushes: Option<mpsc::UnboundedSender<PushInfo>>,
    ) -> Result<ClusterClient, LockError> {
        let protocol = match self.address.resp3 || pushes.is_some() {
            true => ProtocolVersion::RESP3,
            false => ProtocolVersion::RESP2,
        };
        let nodes = (self.address.at_each(&self.seeds.nodes))
            .map(|node| node.connection_info(self.backend, protocol, pushes.is_some()))
            .collect::<Result<Vec<_>, LockError>>()?;
        let remap = self
            .seeds
            .dial_instead
            .iter()
            .map(|((host, port), (to_host, to_port))| {
                (
                    NodeAddress::new(host.as_str(), *port),
                    NodeAddress::new(to_host.as_str(), *to_port),
                )
            })
            .collect();
        let mut builder = ClusterClientBuilder::new(nodes)
            .node_address_map(remap)
            .use_protocol(protocol)
            .response_timeout(NO_CRATE_TIMEOUT)
            .overall_response_timeout(None)
            .min_retry_wait(RETRY_WAIT_MIN_MS)
            .max_retry_wait(RETRY_WAIT_MAX_MS);
        #[cfg(feature = "tls")]
        if self.address.tls && self.address.tls_files.is_set() {
            builder = builder.certs(self.address.tls_files.certificates());
        }
        if let Some(pushes) = pushes {
            builder = builder.push_sender(pushes);
        }
        builder.build().map_err(|e| {
            LockError::config(self.backend, format!("{}: {e}", self.address.endpoint()))
        })
    }

    /// A command connection: reads the slot map from the first seed that
    /// answers, then connects to every primary.
    pub async fn connect(&self, timeout: Duration) -> Result<ClusterConnection, CommandError> {
        let client = self
            .client(None)
            .map_err(|e| CommandError::Reply(e.to_string()))?;
        let config = redis::cluster::ClusterConfig::new().set_connection_timeout(timeout);
        Ok(client.get_async_connection_with_config(config).await?)
    }

    /// A listening connection for sharded pub/sub and the receiver of its
    /// messages (including the crate's `Disconnection` notices).
    pub async fn subscriber(
        &self,
        timeout: Duration,
    ) -> Result<(ClusterConnection, mpsc::UnboundedReceiver<PushInfo>), CommandError> {
        let (pushes, received) = mpsc::unbounded_channel();
        let client = self
            .client(Some(pushes))
            .map_err(|e| CommandError::Reply(e.to_string()))?;
        let config = redis::cluster::ClusterConfig::new().set_connection_timeout(timeout);
        Ok((
            client.get_async_connection_with_config(config).await?,
            received,
        ))
    }
}

/// A node's address as the cluster announces it.
pub(crate) type Node = (String, u16);

/// One primary and what it serves, from `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shard {
    pub primary: Node,
    /// Inclusive slot ranges.
    pub slots: Vec<(u16, u16)>,
    pub replicas: Vec<Node>,
}

impl Shard {
    /// `h:p`.
    pub fn name(node: &Node) -> String {
        match node.0.contains(':') {
            true => format!("[{}]:{}", node.0, node.1),
            false => format!("{}:{}", node.0, node.1),
        }
    }
}

/// Sends `cmd` to `node` of a cluster connection; a single server's connection
/// has only the one node.
pub(crate) async fn on_node(
    conn: &mut CommandConn,
    cmd: redis::Cmd,
    node: &Node,
) -> Result<Value, CommandError> {
    match conn {
        CommandConn::Single(conn) => Ok(cmd.query_async(conn).await?),
        CommandConn::Cluster(conn) => {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: node.0.clone(),
                port: node.1,
            });
            Ok(conn.route_command(cmd, routing).await?)
        }
    }
}

/// The primaries, their slot ranges and replicas, from a `CLUSTER NODES`
/// reply, in slot order. Not `CLUSTER SLOTS`: it leaves out replicas that have
/// not yet replicated anything, so an idle cluster would look unreplicated.
///
/// Each line: `id host:port@bus[,hostname] flags primary-id ping pong epoch
/// link slot…`, a slot being `n`, `a-b`, or a `[…]` migration note (skipped).
/// A failed or handshaking node is left out.
pub(crate) fn shards(reply: &str) -> Result<Vec<Shard>, CommandError> {
    let bad = |line: &str| CommandError::Reply(format!("CLUSTER NODES line {line:?}"));
    let mut primaries: Vec<(String, Shard)> = Vec::new();
    let mut replicas: Vec<(String, Node)> = Vec::new();
    for line in reply.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, address, flags, primary_id, ..] = fields[..] else {
            return Err(bad(line));
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if flags
            .iter()
            .any(|f| matches!(*f, "fail" | "handshake" | "noaddr"))
        {
            continue;
        }
        let node = address_of(address).ok_or_else(|| bad(line))?;
        if flags.contains(&"slave") {
            replicas.push((primary_id.to_owned(), node));
            continue;
        }
        let mut slots = Vec::new();
        for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            match (start.parse::<u16>(), end.parse::<u16>()) {
                (Ok(start), Ok(end)) if start <= end && end < 16384 => slots.push((start, end)),
                _ => return Err(bad(line)),
            }
        }
        if !slots.is_empty() {
            let replicas = Vec::new();
            primaries.push((
                id.to_owned(),
                Shard {
                    primary: node,
                    slots,
                    replicas,
                },
            ));
        }
    }
    for (primary_id, replica) in replicas {
        if let Some((_, shard)) = primaries.iter_mut().find(|(id, _)| *id == primary_id) {
            shard.replicas.push(replica);
        }
    }
    let mut shards: Vec<Shard> = primaries.into_iter().map(|(_, shard)| shard).collect();
    for shard in &mut shards {
        shard.slots.sort_unstable();
        shard.replicas.sort_unstable();
    }
    shards.sort_by_key(|s| s.slots.first().copied());
    Ok(shards)
}

/// `host:port` from `host:port@bus[,hostname]` (the host may be an IPv6
/// address, itself full of colons).
fn address_of(field: &str) -> Option<Node> {
    let address = field.split(['@', ',']).next()?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::{Shard, shards};

    const NODES: &str = "\
07c3 10.0.0.4:7003@17003 slave e7d1 0 1426238317239 4 connected
67ed 10.0.0.2:7001@17001 master - 0 1426238316232 2 connected 5461-10922 [5461->-e7d1]
292f 10.0.0.3:7002@17002 master,fail - 1426238316232 0 3 disconnected
e7d1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 10923-16383
9a1b ::1:7004@17004,host5 slave e7d1 0 1426238317741 5 connected
";

    #[test]
    fn cluster_nodes_are_grouped_into_primaries_with_their_replicas() {
        let found = shards(NODES).expect("a well-formed reply");
        assert_eq!(found.len(), 2, "a failed primary is left out: {found:?}");
        assert_eq!(found[0].primary, ("10.0.0.1".to_owned(), 7000));
        assert_eq!(found[0].slots, vec![(0, 5460), (10923, 16383)]);
        assert_eq!(
            found[0].replicas,
            vec![("10.0.0.4".to_owned(), 7003), ("::1".to_owned(), 7004)]
        );
        assert_eq!(Shard::name(&found[0].replicas[1]), "[::1]:7004");
        assert_eq!(
            found[1].slots,
            vec![(5461, 10922)],
            "migration notes skipped"
        );
        assert!(found[1].replicas.is_empty());
    }

    #[test]
    fn a_malformed_reply_is_an_error_not_a_panic() {
        for reply in [
            "just-an-id",
            "e7d1 no-port@1 master - 0 0 1 connected 0-5460",
            "e7d1 10.0.0.1:7000@17000 master - 0 0 1 connected 0-99999",
            "e7d1 10.0.0.1:7000@17000 master - 0 0 1 connected 9-3",
        ] {
            assert!(shards(reply).is_err(), "{reply:?}");
        }
    }
}
