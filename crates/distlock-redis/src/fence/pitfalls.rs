//! The server settings that make a fence forget admitted tokens. A lock's
//! `restart_guard` keeps a restarted server from granting locks too early, but
//! it cannot give a fence back the records a restart lost: the next write with
//! an older token is admitted.

use super::RedisFence;
use crate::cluster::{Node, Shard, on_node, shards};
use crate::command::CommandConn;
use crate::connection::info_field;
use crate::error::CommandError;

impl RedisFence {
    /// One sentence per setting that can lose fence records, each saying what to
    /// change, for the server or for every primary of a cluster. A setting the
    /// server will not show (a renamed `CONFIG`) is reported as unknown, not as
    /// safe.
    pub(super) async fn record_pitfalls(&self) -> Result<Vec<String>, CommandError> {
        let nodes: Vec<Option<Node>> = match self.primaries().await? {
            Some(primaries) => primaries.into_iter().map(Some).collect(),
            None => vec![None],
        };
        let mut warnings = Vec::new();
        for node in &nodes {
            warnings.extend(self.pitfalls_at(node.as_ref()).await?);
        }
        Ok(warnings)
    }

    /// The primaries, when the fence is on a cluster.
    async fn primaries(&self) -> Result<Option<Vec<Node>>, CommandError> {
        let slots = self
            .connection
            .call(self.timeout, |mut conn| async move {
                if let CommandConn::Single(_) = conn {
                    return Ok(None);
                }
                let reply: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut conn)
                    .await?;
                Ok(Some(reply))
            })
            .await?;
        let Some(slots) = slots else {
            return Ok(None);
        };
        Ok(Some(
            shards(&slots)?.into_iter().map(|s| s.primary).collect(),
        ))
    }

    async fn pitfalls_at(&self, node: Option<&Node>) -> Result<Vec<String>, CommandError> {
        let host = &node.map_or_else(|| self.endpoint.to_string(), Shard::name);
        let mut warnings = Vec::new();
        let persistence = self.info("persistence", node).await?;
        let appendfsync = self.config("appendfsync", node).await;
        match (
            info_field(&persistence, "aof_enabled"),
            appendfsync.as_deref(),
        ) {
            (Some("1"), Ok("always")) => {}
            (Some("1"), Ok(every)) => warnings.push(format!(
                "{host}: appendfsync is {every}: a crash can lose the last second of fence \
                 records, and a stale holder's write is then admitted; set appendfsync always \
                 where fenced data lives"
            )),
            (Some("1"), Err(e)) => warnings.push(format!(
                "{host}: appendfsync could not be read ({e}); fence records survive a crash only \
                 with appendfsync always"
            )),
            _ => warnings.push(format!(
                "{host}: append-only persistence is off: a restart forgets every fence record, \
                 and the next write with an older token is admitted (a lock's restart_guard does \
                 not bring records back); set appendonly yes and appendfsync always where fenced \
                 data lives"
            )),
        }
        let replication = self.info("replication", node).await?;
        let replicas = info_field(&replication, "connected_slaves").unwrap_or("0");
        if replicas != "0" && self.replicas.is_none() {
            warnings.push(format!(
                "{host} has {replicas} replica(s) and the URL does not set wait_replicas: \
                 replication is asynchronous, so a failover to a replica that missed the latest \
                 writes forgets their fence records; add ?wait_replicas=1 to have each write \
                 acknowledged, or fence data that must survive failover in a store with \
                 synchronous commits"
            ));
        }
        match self.config("maxmemory-policy", node).await {
            Ok(policy) if policy.starts_with("allkeys") => warnings.push(format!(
                "{host}: maxmemory-policy is {policy}: under memory pressure Redis may evict fence \
                 records (they never expire, so volatile-* policies leave them alone); set \
                 noeviction or a volatile-* policy"
            )),
            Ok(_) => {}
            Err(e) => warnings.push(format!(
                "{host}: maxmemory-policy could not be read ({e}); allkeys-* policies can evict \
                 fence records"
            )),
        }
        Ok(warnings)
    }

    /// `cmd` on `node` of a cluster, or on the one server.
    async fn ask<T: redis::FromRedisValue>(
        &self,
        cmd: redis::Cmd,
        node: Option<&Node>,
    ) -> Result<T, CommandError> {
        let value = self
            .connection
            .call(self.timeout, |mut conn| {
                let (cmd, node) = (cmd.clone(), node.cloned());
                async move {
                    match node {
                        Some(node) => on_node(&mut conn, cmd, &node).await,
                        None => Ok(cmd.query_async(&mut conn).await?),
                    }
                }
            })
            .await?;
        T::from_redis_value(value).map_err(|e| CommandError::Reply(e.to_string()))
    }

    async fn info(
        &self,
        section: &'static str,
        node: Option<&Node>,
    ) -> Result<String, CommandError> {
        let mut info = redis::cmd("INFO");
        info.arg(section);
        self.ask(info, node).await
    }

    async fn config(
        &self,
        name: &'static str,
        node: Option<&Node>,
    ) -> Result<String, CommandError> {
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg(name);
        let pair: Vec<String> = self.ask(get, node).await?;
        pair.into_iter()
            .nth(1)
            .ok_or_else(|| CommandError::Reply(format!("CONFIG GET {name} gave no value")))
    }
}
