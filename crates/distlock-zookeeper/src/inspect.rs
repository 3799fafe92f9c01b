//! What an operator (and the conformance suite's fault hooks) can ask beyond the
//! lock API, over the same layout the locks use: the holder is the first lock
//! node of the lock directory, residue is every node left in the directories of
//! matching names. Requests go on a session of their own (see `session.rs`),
//! except the benchmarks' floor, which runs the recipe's three requests on the
//! session a lock of that ttl would use.

use crate::backend::ZkBackend;
use crate::keys;
use crate::protocol;
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect};
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// How long the `srvr` four-letter word may take.
const SRVR_TIMEOUT: Duration = Duration::from_secs(5);

impl ZkBackend {
    pub(crate) async fn inspector(&self) -> Result<Arc<Session>, LockError> {
        self.sessions.inspector().await.map_err(|e| self.error(e))
    }

    /// The escaped names under `root` (a namespace or a primitive's
    /// directory) of the names starting with `prefix`.
    async fn names_in(
        &self,
        client: &zk::Client,
        root: &str,
        prefix: &str,
    ) -> Result<Vec<String>, LockError> {
        let children = self.requests.children(client, root).await;
        let children = children.map_err(|e| self.error(e))?.unwrap_or_default();
        Ok(children
            .into_iter()
            .filter(|escaped| keys::unescape_name(escaped).is_some_and(|n| n.starts_with(prefix)))
            .collect())
    }

    /// Every node left in the directories under `root` whose names start with
    /// `prefix` (in their subdirectories `parts`, when given): what a crashed
    /// or cancelled client of a lock or primitive could leave behind.
    pub(crate) async fn residue_in(
        &self,
        root: String,
        prefix: &str,
        parts: &[&str],
    ) -> Result<Vec<String>, LockError> {
        let session = self.inspector().await?;
        let client = &session.client;
        let mut found = Vec::new();
        for escaped in self.names_in(client, &root, prefix).await? {
            let dir = keys::node_path(&root, &escaped);
            let dirs = match parts {
                [] => vec![dir],
                parts => parts
                    .iter()
                    .map(|part| keys::node_path(&dir, part))
                    .collect(),
            };
            for dir in dirs {
                let nodes = self.requests.children(client, &dir).await;
                let nodes = nodes.map_err(|e| self.error(e))?.unwrap_or_default();
                found.extend(nodes.iter().map(|node| keys::node_path(&dir, node)));
            }
        }
        Ok(found)
    }

    /// The lock directory's queue, the holder first; empty when there is none.
    async fn queue_of(&self, key: &LockKey) -> Result<(String, Vec<String>), LockError> {
        let session = self.inspector().await?;
        let dir = self.lock_dir(key.as_str());
        let queue = self
            .requests
            .list_queue(&session.client, &dir, keys::NodeKind::Lock.queue())
            .await
            .map_err(|e| self.error(e))?;
        Ok((dir, queue.unwrap_or_default()))
    }
}

#[async_trait]
impl Inspect for ZkBackend {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let (dir, queue) = self.queue_of(key).await?;
        let Some(first) = queue.into_iter().next() else {
            return Ok(None);
        };
        let session = self.inspector().await?;
        let read = (self.requests)
            .children_data(&session.client, &dir, vec![first])
            .await
            .map_err(|e| self.error(e))?;
        // Gone between the list and the read: released meanwhile.
        Ok(read.into_iter().next().map(|(first, data, stat)| {
            // The owner's session timeout is not on the node.
            let expires_in = None;
            let token = u64::try_from(stat.czxid).ok().map(FencingToken::new);
            Holder::new(first, token, expires_in)
                .with_meta(HolderMeta::decode(&String::from_utf8_lossy(&data)))
        }))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        self.residue_in(format!("/{}", self.namespace), prefix, &[])
            .await
    }

    /// The name directories (container nodes, which the server reaps once
    /// empty) of the names starting with `prefix`, of every primitive.
    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let session = self.inspector().await?;
        let root = format!("/{}", self.namespace);
        let mut total = 0;
        for dir in ["", keys::SEMAPHORES, keys::RWLOCKS, keys::ELECTIONS] {
            let dir = if dir.is_empty() {
                root.clone()
            } else {
                keys::node_path(&root, dir)
            };
            total += self.names_in(&session.client, &dir, prefix).await?.len();
        }
        Ok(Some(total))
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let (dir, queue) = self.queue_of(key).await?;
        let Some(first) = queue.first() else {
            return Ok(false);
        };
        let session = self.inspector().await?;
        self.requests
            .delete_node(&session.client, &keys::node_path(&dir, first))
            .await
            .map_err(|e| self.error(e))
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let Some(server) = &self.first_server else {
            return Ok(Vec::new());
        };
        let answer = match protocol::four_letter_word(server, "srvr", SRVR_TIMEOUT).await {
            Ok(answer) => answer,
            Err(why) => {
                return Ok(vec![format!(
                    "cannot read the ZooKeeper version with `srvr` ({why}); allow it with \
                     4lw.commands.whitelist=srvr to let `distlock check` look for known bugs"
                )]);
            }
        };
        Ok(match protocol::server_version(&answer) {
            Some((line, version)) if version < (3, 5, 4) => vec![format!(
                "ZooKeeper {line} is older than 3.5.4: it has no container nodes (empty lock \
                 directories pile up) and predates fixes for ephemeral nodes that outlived their \
                 session (ZOOKEEPER-2355), which keeps a dead client's lock held; upgrade to 3.6 \
                 or later"
            )],
            Some(_) => Vec::new(),
            None => vec![format!(
                "cannot parse the ZooKeeper version from {:?}",
                answer.lines().next().unwrap_or_default()
            )],
        })
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some("exists /")
    }

    async fn ping(&self) -> Result<(), LockError> {
        let session = self.inspector().await?;
        self.requests
            .node_stat(&session.client, "/")
            .await
            .map(drop)
            .map_err(|e| self.error(e))
    }

    fn floor(&self) -> Option<Floor> {
        Some(Floor {
            name: "create ephemeral-sequential with getChildren pipelined, then delete",
            requests: 3,
        })
    }

    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let session = self.sessions.for_ttl(ttl, &self.endpoint).await?;
        let dir = self.lock_dir(key.as_str());
        let first = protocol::floor_cycle(&self.requests, &session.client, &dir).await;
        match first.map_err(|e| self.error(e))? {
            true => Ok(()),
            false => Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            }),
        }
    }

    /// `zk_packets_received` of `mntr`: every request the server received, pings
    /// of idle sessions and this `mntr` included. Only for one server: an
    /// ensemble spreads its clients' requests over members this client does not
    /// all know by address.
    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        let (Some(server), false) = (&self.first_server, self.endpoint.contains(',')) else {
            return Ok(None);
        };
        let answer = protocol::four_letter_word(server, "mntr", SRVR_TIMEOUT)
            .await
            .map_err(|why| LockError::backend("zookeeper", format!("mntr on {server}: {why}")))?;
        let received = answer.lines().find_map(|line| {
            let value = line.strip_prefix("zk_packets_received")?;
            value.trim().parse().ok()
        });
        Ok(received)
    }
}
