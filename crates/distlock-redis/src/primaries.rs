//! The servers a question about every key or every server goes to: the
//! client's one server, or each primary of its Redis Cluster (`CLUSTER NODES`
//! names them, as a `SCAN` sees only the node it is sent to); and `SCAN` over
//! all of them, which inspection and the shares' residue both read.

use crate::cluster::{Node, Shard, shards};
use crate::error::CommandError;
use crate::protocol::{Command, ServerClient};
use std::time::Duration;

/// The server a question goes to: the one of a client, or one node of its
/// cluster.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub server: &'a ServerClient,
    pub node: Option<&'a Node>,
}

impl At<'_> {
    /// How warnings name it.
    pub fn name(&self) -> String {
        match self.node {
            Some(node) => Shard::name(node),
            None => self.server.endpoint.to_string(),
        }
    }

    pub async fn query<T>(&self, budget: Duration, cmd: redis::Cmd) -> Result<T, CommandError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let command = match self.node {
            Some(node) => Command::OnNode(cmd, node.clone()),
            None => cmd.into(),
        };
        self.server.query(budget, command).await
    }
}

/// The primaries of a cluster client, and what each serves.
pub(crate) async fn cluster_shards(
    server: &ServerClient,
    budget: Duration,
) -> Result<Vec<Shard>, CommandError> {
    let mut nodes = redis::cmd("CLUSTER");
    nodes.arg("NODES");
    let reply: String = server.query(budget, nodes.into()).await?;
    shards(&reply)
}

/// Where a question about every key or every server goes: the one server, or
/// each primary of the cluster.
pub(crate) async fn every_server(
    server: &ServerClient,
    budget: Duration,
) -> Result<Vec<Option<Node>>, CommandError> {
    match server.cluster {
        false => Ok(vec![None]),
        true => Ok(cluster_shards(server, budget)
            .await?
            .into_iter()
            .map(|shard| Some(shard.primary))
            .collect()),
    }
}

/// Every key matching the `SCAN` pattern, sorted: on the one server, or on
/// each primary of a cluster (a `SCAN` sees only the node it is sent to).
pub(crate) async fn scan_keys(
    server: &ServerClient,
    pattern: &str,
    budget: Duration,
) -> Result<Vec<String>, CommandError> {
    let mut found = Vec::new();
    for node in every_server(server, budget).await? {
        let at = At {
            server,
            node: node.as_ref(),
        };
        found.extend(scan(at, pattern, budget).await?);
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// Every key on one server matching `pattern`.
async fn scan(at: At<'_>, pattern: &str, budget: Duration) -> Result<Vec<String>, CommandError> {
    let (mut cursor, mut found) = (0_u64, Vec::new());
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<String>) = at.query(budget, scan).await?;
        found.extend(keys);
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}
