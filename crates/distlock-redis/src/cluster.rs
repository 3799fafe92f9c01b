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

use crate::connection::{CommandConn, ServerAddress};
use crate::error::CommandError;
use distlock_core::LockError;
use redis::cluster::{ClusterClient, ClusterClientBuilder, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ProtocolVersion, PushInfo, Value};
use std::time::Duration;
use tokio::sync::mpsc;

/// The nodes a `redis+cluster://` URL names, to learn the topology from: any
/// one that answers is enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterSeeds {
    pub nodes: Vec<(String, u16)>,
    /// Addresses to dial instead of those the cluster announces (a NAT, a
    /// tunnel, a proxy): `(announced, dialed)`.
    pub dial_instead: Vec<((String, u16), (String, u16))>,
}

impl ClusterSeeds {
    /// `h1:p1,h2:p2`, for endpoints.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(host, port)| match host.contains(':') {
                true => format!("[{host}]:{port}"),
                false => format!("{host}:{port}"),
            })
            .collect();
        nodes.join(",")
    }
}

/// The crate does its own per-request timeout and retries inside a cluster
/// request; ours bound every call, so theirs must never fire first (a `WAIT`
/// may legitimately block for its whole timeout).
const NO_CRATE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

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
        let nodes = self
            .seeds
            .nodes
            .iter()
            .map(|(host, port)| {
                let node = ServerAddress {
                    host: host.clone(),
                    port: *port,
                    cluster: None,
                    ..self.address.clone()
                };
                node.connection_info(self.backend, protocol, pushes.is_some())
            })
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
            .overall_response_timeout(None);
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

/// One primary and what it serves, from `CLUSTER SLOTS`.
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

/// The primaries, their slot ranges and replicas, from a `CLUSTER SLOTS` reply
/// (`[[start, end, [host, port, id…], [replica…]…]…]`), in slot order.
pub(crate) fn shards(reply: &Value) -> Result<Vec<Shard>, CommandError> {
    let bad = || CommandError::Reply(format!("CLUSTER SLOTS gave {reply:?}"));
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut shards: Vec<Shard> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(start), Some(end)) = (slot(fields.first()), slot(fields.get(1))) else {
            return Err(bad());
        };
        let mut nodes = fields.iter().skip(2).map(node);
        let primary = nodes.next().flatten().ok_or_else(bad)?;
        let replicas: Vec<Node> = nodes.flatten().collect();
        match shards.iter_mut().find(|s| s.primary == primary) {
            Some(shard) => shard.slots.push((start, end)),
            None => shards.push(Shard {
                primary,
                slots: vec![(start, end)],
                replicas,
            }),
        }
    }
    for shard in &mut shards {
        shard.slots.sort_unstable();
    }
    shards.sort_by_key(|s| s.slots.first().copied());
    Ok(shards)
}

fn slot(value: Option<&Value>) -> Option<u16> {
    match value? {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

fn node(value: &Value) -> Option<Node> {
    let Value::Array(fields) = value else {
        return None;
    };
    let host = match fields.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    let port = match fields.get(1)? {
        Value::Int(n) => u16::try_from(*n).ok()?,
        _ => return None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::{Shard, shards};
    use redis::Value;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn cluster_slots_are_grouped_by_primary() {
        let range = |start, end, nodes: Vec<Value>| {
            let mut fields = vec![Value::Int(start), Value::Int(end)];
            fields.extend(nodes);
            Value::Array(fields)
        };
        let reply = Value::Array(vec![
            range(5461, 10922, vec![node("10.0.0.2", 7001)]),
            range(
                0,
                5460,
                vec![node("10.0.0.1", 7000), node("10.0.0.4", 7003)],
            ),
            range(
                10923,
                16383,
                vec![node("10.0.0.1", 7000), node("10.0.0.4", 7003)],
            ),
        ]);
        let found = shards(&reply).expect("a well-formed reply");
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].primary, ("10.0.0.1".to_owned(), 7000));
        assert_eq!(found[0].slots, vec![(0, 5460), (10923, 16383)]);
        assert_eq!(found[0].replicas, vec![("10.0.0.4".to_owned(), 7003)]);
        assert_eq!(Shard::name(&found[1].primary), "10.0.0.2:7001");
        assert!(found[1].replicas.is_empty());
    }

    #[test]
    fn a_malformed_reply_is_an_error_not_a_panic() {
        for reply in [
            Value::Int(3),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(99999)])]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(5)])]),
        ] {
            assert!(shards(&reply).is_err(), "{reply:?}");
        }
    }
}
