//! Redis Cluster launcher: N primaries (and optionally R replicas of each),
//! each a `redis-server` child process with `cluster-enabled yes` on free
//! loopback ports, joined with `redis-cli --cluster create`, ready once every
//! node reports `cluster_state:ok` with all 16384 slots assigned and every
//! replica is linked to its primary.

use super::redis::{RedisOptions, RedisServer};
use super::{READY_TIMEOUT, ServerError, find_binary, url_encode};
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;

/// Keys moved per `MIGRATE` while a slot changes owner.
const MIGRATE_BATCH: usize = 100;

/// A Redis Cluster of launched primaries; every process is killed when this
/// value is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    password: Option<String>,
    replicas: usize,
}

impl RedisCluster {
    /// Starts `primaries` nodes (at least 3, as `redis-cli --cluster create`
    /// requires), spreads the slots over them and waits until the cluster is ok.
    pub async fn start(primaries: usize) -> Result<Self, ServerError> {
        Self::start_with(primaries, RedisOptions::default()).await
    }

    /// [`RedisCluster::start`] with these options for every node (`cluster` is
    /// set for you).
    pub async fn start_with(primaries: usize, options: RedisOptions) -> Result<Self, ServerError> {
        Self::start_replicated(primaries, 0, options).await
    }

    /// `primaries` primaries with `replicas` replicas each (which node gets
    /// which role is `redis-cli`'s choice: ask [`RedisCluster::owner_of`]).
    pub async fn start_replicated(
        primaries: usize,
        replicas: usize,
        options: RedisOptions,
    ) -> Result<Self, ServerError> {
        let options = RedisOptions {
            cluster: true,
            ..options
        };
        let count = primaries * (1 + replicas);
        let nodes = RedisServer::start_many_with(count, &options).await?;
        let cluster = RedisCluster {
            nodes,
            password: options.password,
            replicas,
        };
        let replicas = replicas.to_string();
        let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
        create.extend(cluster.nodes.iter().map(|node| node.addr().to_string()));
        create.extend([
            "--cluster-replicas".to_owned(),
            replicas,
            "--cluster-yes".to_owned(),
        ]);
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        cluster.cli(0, &create).await?;
        cluster.wait_ok().await?;
        Ok(cluster)
    }

    /// `redis+cluster://[:password@]h1:p1,h2:p2,…/`: every node as a seed.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.addr().to_string()).collect();
        match &self.password {
            Some(password) => format!(
                "redis+cluster://:{}@{}/",
                url_encode(password),
                nodes.join(",")
            ),
            None => format!("redis+cluster://{}/", nodes.join(",")),
        }
    }

    /// `rediss+cluster://[:password@]h1:tls1,…/` when the nodes were started
    /// with [`RedisOptions::tls`]; add `?ca=…` to trust them.
    pub fn tls_url(&self) -> Option<String> {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| Some(format!("{}:{}", n.addr().ip(), n.tls_port()?)))
            .collect::<Option<_>>()?;
        Some(match &self.password {
            Some(password) => format!(
                "rediss+cluster://:{}@{}/",
                url_encode(password),
                nodes.join(",")
            ),
            None => format!("rediss+cluster://{}/", nodes.join(",")),
        })
    }

    /// The nodes, in the order they were started (without replicas, also the
    /// order of their slots: node 0 has the lowest range).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Runs `redis-cli` against node `index` and returns its output (one value
    /// a line, as redis-cli prints when not on a terminal). A reply starting
    /// with `ERR` is an error.
    pub async fn cli(&self, index: usize, args: &[&str]) -> Result<String, ServerError> {
        let node = self.nodes.get(index).ok_or_else(|| ServerError::Io {
            context: format!("redis-cli on cluster node {index}"),
            source: std::io::Error::other(format!("there are {} nodes", self.nodes.len())),
        })?;
        let binary = find_binary("redis-cli", "redis-tools")?;
        let mut command = Command::new(binary);
        command
            .arg("-h")
            .arg(node.addr().ip().to_string())
            .arg("-p")
            .arg(node.port().to_string());
        if let Some(password) = &self.password {
            command.env("REDISCLI_AUTH", password);
        }
        let context = format!("redis-cli -p {} {}", node.port(), args.join(" "));
        let output = command
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(ServerError::io(context.clone()))?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() || text.starts_with("ERR") || text.contains("[ERR]") {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(ServerError::Io {
                context,
                source: std::io::Error::other(format!("{}{stderr}", text.trim())),
            });
        }
        Ok(text)
    }

    /// Node `index`'s cluster id.
    pub async fn node_id(&self, index: usize) -> Result<String, ServerError> {
        Ok(self
            .cli(index, &["CLUSTER", "MYID"])
            .await?
            .trim()
            .to_owned())
    }

    /// The index of the node that serves `slot` now, as node 0 sees it.
    pub async fn owner_of(&self, slot: u16) -> Result<usize, ServerError> {
        let slots = self.cli(0, &["CLUSTER", "SLOTS"]).await?;
        // Lines per range: start, end, then host, port, id (and more) per node.
        let lines: Vec<&str> = slots.lines().map(str::trim).collect();
        for window in lines.windows(4) {
            if let [start, end, _host, port] = window
                && let (Ok(start), Ok(end), Ok(port)) = (
                    start.parse::<u16>(),
                    end.parse::<u16>(),
                    port.parse::<u16>(),
                )
                && (start..=end).contains(&slot)
                && let Some(index) = self.nodes.iter().position(|n| n.port() == port)
            {
                return Ok(index);
            }
        }
        Err(ServerError::Io {
            context: format!("find the owner of slot {slot}"),
            source: std::io::Error::other(format!("CLUSTER SLOTS said: {slots}")),
        })
    }

    /// Moves `slot` and its keys from node `from` to node `to` the way
    /// `redis-cli --cluster reshard` does: `IMPORTING` on the target,
    /// `MIGRATING` on the source (clients get `ASK` for keys already moved),
    /// `MIGRATE` in batches, then `SETSLOT NODE` everywhere.
    pub async fn move_slot(&self, slot: u16, from: usize, to: usize) -> Result<(), ServerError> {
        let (from_id, to_id) = (self.node_id(from).await?, self.node_id(to).await?);
        let slot_text = slot.to_string();
        let target = &self.nodes[to];
        let (host, port) = (target.addr().ip().to_string(), target.port().to_string());
        self.cli(
            to,
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from_id],
        )
        .await?;
        self.cli(
            from,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to_id],
        )
        .await?;
        let batch = MIGRATE_BATCH.to_string();
        loop {
            let keys = self
                .cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_text, &batch])
                .await?;
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", &host, &port, "", "0", "5000"];
            if let Some(password) = &self.password {
                migrate.extend(["AUTH", password]);
            }
            migrate.push("KEYS");
            migrate.extend(keys);
            self.cli(from, &migrate).await?;
        }
        // The target first, so the source's redirections lead somewhere that
        // accepts them; then every node, so none redirects back.
        let order = std::iter::once(to).chain((0..self.nodes.len()).filter(|&i| i != to));
        for index in order {
            self.cli(index, &["CLUSTER", "SETSLOT", &slot_text, "NODE", &to_id])
                .await?;
        }
        Ok(())
    }

    /// Waits until every running node reports `cluster_state:ok` and all slots
    /// assigned and ok (after a start, or a node's restart).
    pub async fn wait_ok(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        loop {
            let mut all_ok = true;
            for index in 0..self.nodes.len() {
                let info = self
                    .cli(index, &["CLUSTER", "INFO"])
                    .await
                    .unwrap_or_default();
                all_ok &=
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384");
                let replication = self
                    .cli(index, &["INFO", "replication"])
                    .await
                    .unwrap_or_default();
                all_ok &= match replication.contains("role:master") {
                    true => replication.contains(&format!("connected_slaves:{}", self.replicas)),
                    false => replication.contains("master_link_status:up"),
                };
            }
            if all_ok {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(ServerError::NotReady {
                    name: "redis cluster".into(),
                    waited: READY_TIMEOUT,
                    log_tail: self.nodes[0].log_tail(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A restart is every node's (each loses what it does not persist, as one
/// server would), then the wait for `cluster_state:ok`; the process faults of a
/// chaos run hit node 0.
#[async_trait::async_trait]
impl super::Launched for RedisCluster {
    async fn restart(&self) -> Result<(), ServerError> {
        for node in &self.nodes {
            node.restart().await?;
        }
        self.wait_ok().await
    }

    fn log_tail(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .map(|node| format!("node {}:\n{}", node.port(), node.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn process(&self) -> &super::ServerProcess {
        &self.nodes[0]
    }
}
