//! The server settings that make a fence forget admitted tokens. A lock's
//! `restart_guard` keeps a restarted server from granting locks too early, but
//! it cannot give a fence back the records a restart lost: the next write with
//! an older token is admitted.

use super::RedisFence;
use crate::connection::info_field;
use crate::error::CommandError;

impl RedisFence {
    /// One sentence per setting that can lose fence records, each saying what to
    /// change. A setting the server will not show (a renamed `CONFIG`) is
    /// reported as unknown, not as safe.
    pub(super) async fn record_pitfalls(&self) -> Result<Vec<String>, CommandError> {
        let host = &self.endpoint;
        let mut warnings = Vec::new();
        let persistence = self.info("persistence").await?;
        let appendfsync = self.config("appendfsync").await;
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
        let replication = self.info("replication").await?;
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
        match self.config("maxmemory-policy").await {
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

    async fn info(&self, section: &'static str) -> Result<String, CommandError> {
        self.connection
            .call(self.timeout, |mut conn| async move {
                Ok(redis::cmd("INFO")
                    .arg(section)
                    .query_async(&mut conn)
                    .await?)
            })
            .await
    }

    async fn config(&self, name: &'static str) -> Result<String, CommandError> {
        let pair: Vec<String> = self
            .connection
            .call(self.timeout, |mut conn| async move {
                let mut get = redis::cmd("CONFIG");
                get.arg("GET").arg(name);
                Ok(get.query_async(&mut conn).await?)
            })
            .await?;
        pair.into_iter()
            .nth(1)
            .ok_or_else(|| CommandError::Reply(format!("CONFIG GET {name} gave no value")))
    }
}
