//! The servers an inspection asks: the client's one server, or each primary
//! of its Redis Cluster, named by `CLUSTER NODES`; and how the topology
//! describes either.

use crate::cluster::{Node, Shard, shards};
use crate::connection::info_field;
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
async fn cluster_shards(
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
pub(super) async fn every_server(
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

/// The primaries of a cluster, their slots and replicas, as `CLUSTER NODES`
/// gives them.
pub(super) async fn describe_cluster(
    server: &ServerClient,
    budget: Duration,
) -> Result<String, CommandError> {
    let shards = cluster_shards(server, budget).await?;
    let described: Vec<String> = shards
        .iter()
        .map(|shard| {
            let slots: Vec<String> = shard
                .slots
                .iter()
                .map(|(start, end)| format!("{start}-{end}"))
                .collect();
            let replicas: Vec<String> = shard.replicas.iter().map(Shard::name).collect();
            format!(
                "{} (slots {}; {} replica(s){})",
                Shard::name(&shard.primary),
                slots.join(","),
                replicas.len(),
                match replicas.is_empty() {
                    true => String::new(),
                    false => format!(": {}", replicas.join(", ")),
                }
            )
        })
        .collect();
    Ok(format!(
        "{}: a Redis Cluster of {} primaries: {}",
        server.endpoint,
        shards.len(),
        described.join("; ")
    ))
}

/// What `INFO` says of the server a client reached: its role, port and
/// replicas (`ip:port` and state each).
pub(super) async fn describe(
    server: &ServerClient,
    budget: Duration,
) -> Result<String, CommandError> {
    let mut info = redis::cmd("INFO");
    info.arg("server").arg("replication");
    let info: String = server.query(budget, info.into()).await?;
    let role = match info_field(&info, "role") {
        Some("master") => "primary",
        Some("slave") => "replica",
        _ => "server",
    };
    let port = info_field(&info, "tcp_port").unwrap_or("?");
    let replicas: Vec<String> = info
        .lines()
        .filter(|line| line.starts_with("slave") && line.contains("ip="))
        .filter_map(|line| {
            let fields = line.split_once(':')?.1;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            Some(format!(
                "{}:{} {}",
                field("ip")?,
                field("port")?,
                field("state")?
            ))
        })
        .collect();
    Ok(format!(
        "{}: a {role} (port {port}) with {} replica(s){}",
        server.endpoint,
        replicas.len(),
        match replicas.is_empty() {
            true => String::new(),
            false => format!(" ({})", replicas.join(", ")),
        }
    ))
}
