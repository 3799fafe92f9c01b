//! What an operator (and the conformance suite) can ask of a Redis lock: who
//! holds a key, which lock keys are left under a prefix, a force-unlock, and the
//! server settings that weaken the lock. The per-server parts are shared with
//! Redlock, which asks every node, and with Redis Cluster mode, which asks
//! every primary (`CLUSTER NODES` names them).

use crate::backend::RedisBackend;
use crate::connection::info_field;
use crate::error::CommandError;
use crate::keys::{LockKeys, lock_key_pattern, state_key_pattern};
use crate::primaries::{At, every_server, scan_keys};
use crate::protocol::{Attempt, ServerClient};
use crate::restart::RestartGuard;
use crate::shares::residue;
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect, random_owner};
use distlock_core::{FencingToken, LockError, LockKey};
use std::time::Duration;

mod nodes;
use nodes::{describe, describe_cluster};

/// How a server is used, for the warnings that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The only server of a `RedisLock`; `waits` when `wait_replicas` is set.
    Single { waits: bool },
    /// One of a Redlock's independent nodes.
    RedlockNode,
    /// A primary of a Redis Cluster; `waits` when `wait_replicas` is set.
    ClusterPrimary { waits: bool },
}

/// `PING`, the cheapest round trip.
pub(crate) async fn ping(server: &ServerClient, budget: Duration) -> Result<(), CommandError> {
    let _: String = server.query(budget, redis::cmd("PING").into()).await?;
    Ok(())
}

/// The floor of one cycle: the acquire script, then the release script, as a
/// lock cycle sends them, with nothing around them. `Ok(false)` when the key
/// was held.
pub(crate) async fn floor_cycle(
    server: &ServerClient,
    keys: &LockKeys,
    ttl: Duration,
    guard: Option<&RestartGuard>,
    budget: Duration,
) -> Result<bool, CommandError> {
    let owner = random_owner();
    match server.acquire(keys, &owner, ttl, guard, budget).await? {
        Attempt::Won(..) => server.release(keys, &owner, budget).await,
        Attempt::Held(_) => Ok(false),
    }
}

/// What [`floor_cycle`] sends, for the bench's table.
pub(crate) const FLOOR_NAME: &str = "acquire.lua + release.lua (EVALSHA x2)";

/// The socket reads the server has served (`total_reads_processed`): one per
/// request, or per batch of pipelined requests that arrived together. Not
/// `total_commands_processed`, which also counts every command a Lua script
/// runs inside the server, so one `EVALSHA` would count as five. A cluster's
/// is the sum over its primaries.
pub(crate) async fn requests_served(
    server: &ServerClient,
    budget: Duration,
) -> Result<u64, CommandError> {
    info_total(server, budget, "stats", "total_reads_processed").await
}

/// The `INFO <section>` number `field`, summed over every server (each
/// primary of a Cluster).
async fn info_total(
    server: &ServerClient,
    budget: Duration,
    section: &str,
    field: &str,
) -> Result<u64, CommandError> {
    let mut total = 0_u64;
    for node in every_server(server, budget).await? {
        let at = At {
            server,
            node: node.as_ref(),
        };
        let mut info = redis::cmd("INFO");
        info.arg(section);
        let text: String = at.query(budget, info).await?;
        let value: u64 = info_field(&text, field)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| CommandError::Reply(format!("INFO {section} without {field}")))?;
        total = total.saturating_add(value);
    }
    Ok(total)
}

/// A read for a warning: a server that cannot be reached fails the check, one
/// that refuses the command (an ACL) becomes a warning itself.
async fn read<T>(
    at: At<'_>,
    budget: Duration,
    command: redis::Cmd,
    what: &str,
    warnings: &mut Vec<String>,
) -> Result<Option<T>, CommandError>
where
    T: redis::FromRedisValue + Send + 'static,
{
    match at.query(budget, command).await {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.outcome_unknown() => Err(e),
        Err(e) => {
            warnings.push(format!(
                "{}: cannot read {what} ({e}); check it by hand",
                at.name()
            ));
            Ok(None)
        }
    }
}

/// The settings of one server (every primary of a cluster) that can silently
/// free a held lock or lower a token; `guarded` says the client has a restart
/// guard.
pub(crate) async fn server_pitfalls(
    server: &ServerClient,
    budget: Duration,
    role: Role,
    guarded: bool,
) -> Result<Vec<String>, CommandError> {
    let mut warnings = Vec::new();
    for node in every_server(server, budget).await? {
        let at = At {
            server,
            node: node.as_ref(),
        };
        warnings.extend(pitfalls_at(at, budget, role, guarded).await?);
    }
    Ok(warnings)
}

async fn pitfalls_at(
    at: At<'_>,
    budget: Duration,
    role: Role,
    guarded: bool,
) -> Result<Vec<String>, CommandError> {
    let host = &at.name();
    let mut warnings = Vec::new();
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy");
    let policy: Option<Vec<String>> =
        read(at, budget, config, "maxmemory-policy", &mut warnings).await?;
    if let Some([_, policy]) = policy.as_deref()
        && policy != "noeviction"
    {
        warnings.push(format!(
            "{host}: maxmemory-policy is {policy}: under memory pressure Redis may evict lock keys \
             (they have a ttl) or fence counters, silently freeing held locks or lowering tokens; \
             set maxmemory-policy noeviction"
        ));
    }
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    let replication: String = read(at, budget, info, "INFO replication", &mut warnings)
        .await?
        .unwrap_or_default();
    if info_field(&replication, "role") == Some("slave") {
        warnings.push(format!(
            "{host} is a replica: point the lock at the primary; replicas reject or lose lock writes"
        ));
    }
    let replicas: u32 = info_field(&replication, "connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let waits = matches!(
        role,
        Role::Single { waits: true } | Role::ClusterPrimary { waits: true }
    );
    if replicas > 0 && role != Role::RedlockNode && !waits {
        warnings.push(format!(
            "{host} has {replicas} replica(s) and the URL does not set wait_replicas: a failover \
             can lose held locks and fence counters (replication is asynchronous); add \
             ?wait_replicas=1 to narrow the window, or use etcd/ZooKeeper when correctness must \
             survive failover"
        ));
    }
    if !guarded && let Some(warning) = persistence_pitfall(at, budget, role, &mut warnings).await? {
        warnings.push(warning);
    }
    Ok(warnings)
}

/// Without AOF a restart forgets locks that holders still believe they hold, and
/// the server grants them again at once unless a restart guard stops it.
async fn persistence_pitfall(
    at: At<'_>,
    budget: Duration,
    role: Role,
    warnings: &mut Vec<String>,
) -> Result<Option<String>, CommandError> {
    let mut info = redis::cmd("INFO");
    info.arg("persistence");
    let persistence: Option<String> = read(at, budget, info, "INFO persistence", warnings).await?;
    if persistence.is_none_or(|p| info_field(&p, "aof_enabled") == Some("1")) {
        return Ok(None);
    }
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("save");
    let save: Option<Vec<String>> = read(at, budget, config, "save", warnings).await?;
    let snapshots = save.is_some_and(|s| s.get(1).is_some_and(|points| !points.is_empty()));
    let (what, forgets) = match snapshots {
        true => (
            "only RDB snapshots",
            "every lock taken since the last snapshot",
        ),
        false => ("no AOF and no RDB save points", "every lock"),
    };
    let rule = match role {
        Role::RedlockNode => ": Redlock's delayed-restart rule, enforced by the node",
        Role::Single { .. } => "",
        Role::ClusterPrimary { .. } => {
            return Ok(Some(format!(
                "{}: append-only persistence is off ({what}): a restart forgets {forgets} in \
                 this primary's slots, and the primary grants them again at once while their \
                 holders still run until they notice; restart_guard is not available in \
                 cluster mode, so set appendonly yes with appendfsync always on every primary",
                at.name()
            )));
        }
    };
    Ok(Some(format!(
        "{}: append-only persistence is off ({what}): a restart forgets {forgets}, and the \
         server grants them again at once while their holders still run until they notice; set \
         restart_guard to at least the longest ttl in use on every client{rule} (or appendonly \
         yes with appendfsync always)",
        at.name()
    )))
}

#[async_trait]
impl Inspect for RedisBackend {
    async fn topology(&self) -> Result<Option<String>, LockError> {
        if self.server.cluster {
            return describe_cluster(&self.server, self.timeout)
                .await
                .map(Some)
                .map_err(|e| self.error(e));
        }
        describe(&self.server, self.timeout)
            .await
            .map(Some)
            .map_err(|e| self.error(e))
    }

    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let keys = LockKeys::new(self.namespace(), key);
        let recorded = self
            .server
            .recorded(&keys, self.timeout)
            .await
            .map_err(|e| self.error(e))?;
        let expires_in = recorded.expires_in();
        let token = recorded.fence.map(FencingToken::new);
        Ok((recorded.owner).map(|owner| Holder::from_tagged(&owner, token, expires_in)))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let pattern = lock_key_pattern(self.namespace(), prefix);
        let mut found = scan_keys(&self.server, &pattern, self.timeout)
            .await
            .map_err(|e| self.error(e))?;
        if self.fair {
            // The fair lock's live places in its queues.
            let at = ("queue", "timeouts");
            let queued = residue(&self.server, self.namespace(), prefix, at, self.timeout);
            found.extend(queued.await?);
        }
        Ok(found)
    }

    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let pattern = state_key_pattern(self.namespace(), prefix);
        let keys = scan_keys(&self.server, &pattern, self.timeout).await;
        Ok(Some(keys.map_err(|e| self.error(e))?.len()))
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let keys = LockKeys::new(self.namespace(), key);
        self.server
            .delete_holder(&keys, self.timeout)
            .await
            .map_err(|e| self.error(e))
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let waits = self.replicas.is_some();
        let role = match self.server.cluster {
            true => Role::ClusterPrimary { waits },
            false => Role::Single { waits },
        };
        server_pitfalls(&self.server, self.timeout, role, self.guard.is_some())
            .await
            .map_err(|e| self.error(e))
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some("PING")
    }

    async fn ping(&self) -> Result<(), LockError> {
        ping(&self.server, self.timeout)
            .await
            .map_err(|e| self.error(e))
    }

    fn floor(&self) -> Option<Floor> {
        Some(Floor {
            name: FLOOR_NAME,
            requests: 2,
        })
    }

    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let keys = LockKeys::new(self.namespace(), key);
        let guard = self.guard.as_ref();
        match floor_cycle(&self.server, &keys, ttl, guard, self.timeout).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            }),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn server_memory(&self) -> Result<Option<(&'static str, u64)>, LockError> {
        let used = info_total(&self.server, self.timeout, "memory", "used_memory").await;
        Ok(Some(("used_memory", used.map_err(|e| self.error(e))?)))
    }

    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        requests_served(&self.server, self.timeout)
            .await
            .map(Some)
            .map_err(|e| self.error(e))
    }
}
