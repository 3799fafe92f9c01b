//! The wire protocol: Apache Curator's lock recipe as znode requests, in the order
//! an acquisition sends them, and the four-letter words read beside it.
//!
//! 1. [`Requests::create_node`]: `create {dir}/_c_{uuid}-lock-` as
//!    `EPHEMERAL_SEQUENTIAL`; when the directory is missing,
//!    [`Requests::create_lock_dir`] first.
//! 2. After a create whose reply was lost, [`Requests::find_own_node`]: list the
//!    directory for our uuid (Curator's protected mode) and read its `czxid`.
//! 3. [`Requests::list_queue`]: the directory's lock nodes in queue order; the
//!    first holds the lock.
//! 4. [`Requests::watch_node`]: a data watch on the node just before ours.
//! 5. Renewal is [`Requests::node_stat`] of our node, release
//!    [`Requests::delete_node`]. A cancelled acquire sends [`delete_at_once`] or
//!    [`delete_own_nodes`] from its drop.
//!
//! The other recipes use the same requests with their own node kinds
//! (`latch-`, `__READ__`, `__WRIT__`, `lease-`, see `keys::NodeKind`; the
//! watched node is the one that blocks ours), and the semaphore adds
//! [`Requests::watch_children`] (the guard holder's watch on the leases) and
//! [`Requests::children_data`] (inspection, reading every node in one round
//! trip).

use crate::error::ZkError;
use crate::keys::{self, NodeKind};
use distlock_core::toolkit::UndoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::{self as zk, Acl, Acls, CreateMode, Stat};

/// A lock node of ours: its name (the last path segment) and its `czxid`, the
/// fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnNode {
    pub name: String,
    pub czxid: i64,
}

/// The znode requests of one lock client: the ACL put on what it creates, how
/// long one reply may take, and how many requests it sent.
#[derive(Debug)]
pub(crate) struct Requests {
    acls: Vec<Acl>,
    timeout: Duration,
    sent: AtomicU64,
}

impl Requests {
    pub fn new(acls: Vec<Acl>, timeout: Duration) -> Self {
        Requests {
            acls,
            timeout,
            sent: AtomicU64::new(0),
        }
    }

    /// How many requests were sent since the last [`Requests::reset_count`].
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn reset_count(&self) {
        self.sent.store(0, Ordering::Relaxed);
    }

    /// Sends one request and waits for its reply, at most `timeout`.
    async fn call<T>(
        &self,
        op: &'static str,
        path: &str,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, ZkError> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, request).await {
            Ok(reply) => reply.map_err(|source| ZkError::Request {
                op,
                path: path.to_owned(),
                source,
            }),
            Err(_) => Err(ZkError::TimedOut {
                op,
                path: path.to_owned(),
                timeout: self.timeout,
            }),
        }
    }

    /// `mkdir -p` of the lock directory as container nodes, which the server
    /// deletes once their last child is gone.
    pub async fn create_lock_dir(&self, client: &zk::Client, dir: &str) -> Result<(), ZkError> {
        let options = CreateMode::Container.with_acls(Acls::new(&self.acls));
        match self.call("mkdir", dir, client.mkdir(dir, &options)).await {
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Err(ZkError::Request {
                op: "mkdir",
                path: format!("{dir} (the chroot does not exist)"),
                source: zk::Error::NoNode,
            }),
            other => other,
        }
    }

    /// Creates our ephemeral-sequential node `{dir}/{marker}{base}{sequence}`
    /// holding `data` (`base` is the kind's: `lock-`, `lease-`, `latch-`,
    /// `__READ__`, `__WRIT__`). `NoNode` means the directory is missing.
    pub async fn create_node(
        &self,
        client: &zk::Client,
        dir: &str,
        marker: &str,
        kind: NodeKind,
        data: &[u8],
    ) -> Result<OwnNode, ZkError> {
        let prefix = keys::node_path(dir, &format!("{marker}{}", kind.base()));
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&self.acls));
        let (stat, sequence) = self
            .call("create", &prefix, client.create(&prefix, data, &options))
            .await?;
        Ok(OwnNode {
            name: format!("{marker}{}{sequence}", kind.base()),
            czxid: stat.czxid,
        })
    }

    /// Looks for the node of the acquisition `marker` after a create whose reply
    /// was lost: `None` when the create never took effect.
    pub async fn find_own_node(
        &self,
        client: &zk::Client,
        dir: &str,
        marker: &str,
    ) -> Result<Option<OwnNode>, ZkError> {
        let Some(children) = self.children(client, dir).await? else {
            return Ok(None);
        };
        let Some(name) = children.into_iter().find(|c| c.starts_with(marker)) else {
            return Ok(None);
        };
        let path = keys::node_path(dir, &name);
        Ok(self.node_stat(client, &path).await?.map(|stat| OwnNode {
            name,
            czxid: stat.czxid,
        }))
    }

    /// The nodes of `kinds` in `dir`, first in line first; `None` when the
    /// directory does not exist.
    pub async fn list_queue(
        &self,
        client: &zk::Client,
        dir: &str,
        kinds: &[NodeKind],
    ) -> Result<Option<Vec<String>>, ZkError> {
        let children = self.children(client, dir).await?;
        Ok(children.map(|c| keys::sort_queue_of(c, kinds)))
    }

    /// `getChildren` with a watch that fires when a child comes or goes;
    /// `None` when `dir` does not exist.
    pub async fn watch_children(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<(Vec<String>, zk::OneshotWatcher)>, ZkError> {
        match self
            .call("list", dir, client.list_and_watch_children(dir))
            .await
        {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The data and stat of every child `names` of `dir` that still exists,
    /// in the order given. The reads are all sent before the first reply is
    /// awaited: one round trip, not one per child.
    pub async fn children_data(
        &self,
        client: &zk::Client,
        dir: &str,
        names: Vec<String>,
    ) -> Result<Vec<(String, Vec<u8>, Stat)>, ZkError> {
        let pending: Vec<_> = names
            .into_iter()
            .map(|name| {
                let read = client.get_data(&keys::node_path(dir, &name));
                (name, read)
            })
            .collect();
        let mut found = Vec::with_capacity(pending.len());
        for (name, read) in pending {
            let path = keys::node_path(dir, &name);
            match self.call("get", &path, read).await {
                Ok((data, stat)) => found.push((name, data, stat)),
                Err(e) if e.code() == Some(&zk::Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// `getChildren`: the names under `dir`, `None` when it does not exist.
    pub async fn children(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<Vec<String>>, ZkError> {
        match self.call("list", dir, client.list_children(dir)).await {
            Ok(children) => Ok(Some(children)),
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets a data watch on `path`, which fires when the node goes; `None` when
    /// it is already gone.
    pub async fn watch_node(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<Option<zk::OneshotWatcher>, ZkError> {
        match self
            .call("watch", path, client.get_and_watch_data(path))
            .await
        {
            Ok((_, _, watcher)) => Ok(Some(watcher)),
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `exists` with a watch that fires when `path` is created or deleted.
    pub async fn watch_exists(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(Option<Stat>, zk::OneshotWatcher), ZkError> {
        self.call("exists", path, client.check_and_watch_stat(path))
            .await
    }

    /// `exists`: the node's stat, `None` when it does not exist.
    pub async fn node_stat(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<Option<Stat>, ZkError> {
        self.call("exists", path, client.check_stat(path)).await
    }

    /// Deletes a node whatever its version: `false` when it was already gone.
    pub async fn delete_node(&self, client: &zk::Client, path: &str) -> Result<bool, ZkError> {
        match self.call("delete", path, client.delete(path, None)).await {
            Ok(()) => Ok(true),
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The benchmarks' floor: the recipe's three requests with nothing around them,
/// in two round trips (create our node and list the queue behind it, then
/// delete our node). Returns whether our node came first; the directory is
/// created once when missing.
pub(crate) async fn floor_cycle(
    requests: &Requests,
    client: &zk::Client,
    dir: &str,
) -> Result<bool, ZkError> {
    let marker = keys::protected_marker(&uuid::Uuid::new_v4());
    let create = || requests.create_node(client, dir, &marker, NodeKind::Lock, &[]);
    let list = || requests.list_queue(client, dir, NodeKind::Lock.queue());
    // Joined, both go out before either reply is awaited, in order.
    let (own, queue) = match tokio::join!(create(), list()) {
        (Err(e), _) if e.code() == Some(&zk::Error::NoNode) => {
            requests.create_lock_dir(client, dir).await?;
            tokio::join!(create(), list())
        }
        both => both,
    };
    let (own, queue) = (own?, queue?.unwrap_or_default());
    requests
        .delete_node(client, &keys::node_path(dir, &own.name))
        .await?;
    Ok(queue.first() == Some(&own.name))
}

/// Sends the delete of `path` now, ahead of anything the session sends later;
/// only its reply is left to await.
pub(crate) fn delete_at_once(client: &zk::Client, path: &str) -> UndoFuture {
    let delete = client.delete(path, None);
    Box::pin(async move {
        if let Err(error) = delete.await {
            tracing::debug!(%error, "deleting a lock node nobody owns failed");
        }
    })
}

/// Deletes every node of the acquisition `marker` in `dir`, for a create whose
/// outcome is unknown. One session's requests are served in order, so the
/// listing sees the outcome of the create sent before it.
pub(crate) fn delete_own_nodes(client: &zk::Client, dir: String, marker: String) -> UndoFuture {
    let client = client.clone();
    Box::pin(async move {
        let Ok(children) = client.list_children(&dir).await else {
            return;
        };
        for child in children.iter().filter(|c| c.starts_with(&marker)) {
            if let Err(error) = client.delete(&keys::node_path(&dir, child), None).await {
                tracing::debug!(%error, "deleting a cancelled lock node failed");
            }
        }
    })
}

/// Asks one server a four-letter word (`conf`, `srvr`) on its client port and
/// reads the answer, at most 64 KiB within `within`. Servers answer only the
/// words `4lw.commands.whitelist` allows.
pub(crate) async fn four_letter_word(
    address: &str,
    word: &str,
    within: Duration,
) -> Result<String, String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut answer = String::new();
        stream.take(64 * 1024).read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(within, ask).await {
        Ok(Ok(answer)) if !answer.is_empty() => Ok(answer),
        Ok(Ok(_)) => Err(format!("`{word}` is not allowed by 4lw.commands.whitelist")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// `minSessionTimeout` and `maxSessionTimeout` (milliseconds) from a `conf`
/// answer.
pub(crate) fn session_limits(conf: &str) -> Option<(u64, u64)> {
    let value = |name: &str| {
        conf.lines()
            .filter_map(|line| line.trim().split_once('='))
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.trim().parse::<u64>().ok())
    };
    Some((value("minSessionTimeout")?, value("maxSessionTimeout")?))
}

/// The version line of a `srvr` answer (`3.8.4-9316c2a..., built on ...`) and
/// its major, minor and patch numbers.
pub(crate) fn server_version(srvr: &str) -> Option<(&str, (u32, u32, u32))> {
    let line = srvr
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version:"))?
        .trim();
    let mut parts = line
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    let version = (
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    );
    Some((line, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_letter_answers_parse() {
        let conf = "clientPort=2181\nminSessionTimeout=400\nmaxSessionTimeout=4000\n";
        assert_eq!(session_limits(conf), Some((400, 4000)));
        assert_eq!(session_limits("clientPort=2181"), None);
        let srvr = "Zookeeper version: 3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c, built on 2024-02-12 22:16 UTC\nLatency min/avg/max: 0/0.0/0\n";
        let (line, version) = server_version(srvr).unwrap_or_default();
        assert!(line.starts_with("3.8.4-"), "{line}");
        assert_eq!(version, (3, 8, 4));
        assert_eq!(
            server_version("This ZooKeeper instance is not currently serving requests"),
            None
        );
    }
}
