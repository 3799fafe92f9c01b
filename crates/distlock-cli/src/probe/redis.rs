//! Redis and Redlock: `PING`, `CONFIG GET`/`INFO` for pitfalls, `DEL` of the
//! lock key (on every node for Redlock).

use super::Probe;
use super::url::{Parts, parse};
use async_trait::async_trait;
use distlock::LockKey;
use distlock::redis::{DEFAULT_NAMESPACE, LockKeys};
use redis::aio::MultiplexedConnection;

pub struct RedisProbe {
    nodes: Vec<(String, MultiplexedConnection)>,
    namespace: String,
    redlock: bool,
    waits_for_replicas: bool,
}

/// The plain `redis://` URL of each node, credentials included, adapter
/// parameters left out (the `redis` crate does not know them).
fn node_urls(url: &str, parts: &Parts<'_>) -> Vec<String> {
    let tls = url.trim().to_ascii_lowercase().starts_with("rediss")
        || url.trim().to_ascii_lowercase().starts_with("redlocks");
    let scheme = if tls { "rediss" } else { "redis" };
    let userinfo = parts.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let path = parts.path.map(|p| format!("/{p}")).unwrap_or_default();
    let fragment = parts.fragment.map(|f| format!("#{f}")).unwrap_or_default();
    parts
        .hosts
        .iter()
        .map(|host| format!("{scheme}://{userinfo}{host}{path}{fragment}"))
        .collect()
}

impl RedisProbe {
    pub async fn connect(url: &str, redlock: bool) -> Result<Self, String> {
        let parts = parse(url);
        let mut nodes = Vec::new();
        for (node, host) in node_urls(url, &parts).iter().zip(&parts.hosts) {
            let client = redis::Client::open(node.as_str()).map_err(|e| format!("{host}: {e}"))?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("{host}: {e}"))?;
            nodes.push(((*host).to_owned(), conn));
        }
        Ok(RedisProbe {
            nodes,
            namespace: parts
                .param("namespace")
                .unwrap_or(DEFAULT_NAMESPACE)
                .to_owned(),
            redlock,
            waits_for_replicas: parts.param("wait_replicas").is_some(),
        })
    }

    async fn node_pitfalls(&self, host: &str, mut conn: MultiplexedConnection) -> Vec<String> {
        let mut warnings = Vec::new();
        let config: Result<Vec<String>, _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut conn)
            .await;
        match config.as_deref() {
            Ok([_, policy]) if policy != "noeviction" => warnings.push(format!(
                "{host}: maxmemory-policy is {policy}: under memory pressure Redis may evict lock keys \
                 (they have a ttl) or fence counters, silently freeing held locks or lowering tokens; \
                 set maxmemory-policy noeviction"
            )),
            Ok(_) => {}
            Err(e) => warnings.push(format!("{host}: cannot read maxmemory-policy ({e}); make sure it is noeviction")),
        }
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .map(str::to_owned)
        };
        if field("role").as_deref() == Some("slave") {
            warnings.push(format!(
                "{host} is a replica: point the lock at the primary; replicas reject or lose lock writes"
            ));
        }
        let replicas: u32 = field("connected_slaves")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if replicas > 0 && !self.redlock && !self.waits_for_replicas {
            warnings.push(format!(
                "{host} has {replicas} replica(s) and the URL does not set wait_replicas: a failover can lose \
                 held locks and fence counters (replication is asynchronous); add ?wait_replicas=1 to narrow \
                 the window, or use etcd/ZooKeeper when correctness must survive failover"
            ));
        }
        if self.redlock {
            let persistence: String = redis::cmd("INFO")
                .arg("persistence")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            let aof = persistence
                .lines()
                .any(|line| line.trim() == "aof_enabled:1");
            if !aof {
                warnings.push(format!(
                    "{host}: append-only persistence is off: a Redlock node restarted within a ttl forgets \
                     its locks and counters; enable appendonly or delay restarts past the longest ttl"
                ));
            }
        }
        warnings
    }
}

#[async_trait]
impl Probe for RedisProbe {
    fn round_trip_name(&self) -> Option<&'static str> {
        Some(if self.redlock {
            "PING to all nodes"
        } else {
            "PING"
        })
    }

    async fn round_trip(&self) -> Result<(), String> {
        let mut pings = tokio::task::JoinSet::new();
        for (host, conn) in &self.nodes {
            let (host, mut conn) = (host.clone(), conn.clone());
            pings.spawn(async move {
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .map_err(|e| format!("{host}: {e}"))
            });
        }
        // Redlock's rounds need a majority; the raw round to compare with does too.
        let needed = self.nodes.len() / 2 + 1;
        let (mut answered, mut first_error) = (0, None);
        while let Some(joined) = pings.join_next().await {
            match joined {
                Ok(Ok(_)) => answered += 1,
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(e) => first_error = first_error.or(Some(e.to_string())),
            }
            if answered >= needed {
                return Ok(());
            }
        }
        Err(first_error.unwrap_or_else(|| "no node answered".into()))
    }

    async fn pitfalls(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (host, conn) in &self.nodes {
            warnings.extend(self.node_pitfalls(host, conn.clone()).await);
        }
        warnings
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String> {
        let lock = LockKeys::new(&self.namespace, key).lock;
        let mut deleted = false;
        for (host, conn) in &self.nodes {
            let mut conn = conn.clone();
            let removed: u64 = redis::cmd("DEL")
                .arg(&lock)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("{host}: {e}"))?;
            deleted |= removed > 0;
        }
        Ok(deleted)
    }
}
