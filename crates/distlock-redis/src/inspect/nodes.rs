//! How the topology describes itself: the client's one server, or each
//! primary of its Redis Cluster with its slots and replicas.

use crate::cluster::Shard;
use crate::connection::info_field;
use crate::error::CommandError;
use crate::primaries::cluster_shards;
use crate::protocol::ServerClient;
use std::time::Duration;

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
