//! The lock recipe itself: queue a node, find our place, watch the predecessor.
//!
//! Invariant: the holder is the lock node first in sequence order under the lock
//! directory. Each acquisition creates one ephemeral-sequential node, lists the
//! directory, and either holds (first), gives up (`Wait::No`), or watches only the
//! node just before its own and lists again when that one goes. No herd: a release
//! wakes exactly one waiter.

use crate::error::ZkError;
use crate::layout;
use crate::lock::ZkBackend;
use crate::node::{NodeState, QueuedNode};
use distlock_core::LockError;
use distlock_core::backend::{AcquireRequest, WaitUntil};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acls, CreateMode};

/// Pause before retrying a waiter's step after a connection loss (requests
/// issued while disconnected wait for the reconnect anyway).
const RETRY_DELAY: Duration = Duration::from_millis(50);

/// What one list of the lock directory says about our node.
enum Place {
    First,
    Behind(String),
    Missing,
}

impl ZkBackend {
    /// Creates our ephemeral-sequential node, recreating missing parents, and
    /// after a connection loss finds the node by our uuid instead of creating a
    /// second one (Curator's protected mode).
    async fn create_node(&self, node: &mut QueuedNode) -> Result<(), ZkError> {
        let session = node.session.clone();
        let client = &session.client;
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&self.acls));
        loop {
            // A create whose outcome we never learned may have made our node.
            if node.state == NodeState::Unknown && self.find_own_node(node).await? {
                return Ok(());
            }
            node.state = NodeState::Unknown;
            match self
                .call(
                    "create",
                    &node.prefix,
                    client.create(&node.prefix, &[], &options),
                )
                .await
            {
                Ok((stat, sequence)) => {
                    let name = format!("{}{sequence}", &node.prefix[node.dir.len() + 1..]);
                    node.state = NodeState::Created {
                        name,
                        czxid: stat.czxid,
                    };
                    return Ok(());
                }
                // The directory is missing (first use, or container cleanup won a
                // race with us): recreate it and try again.
                Err(e) if e.code() == Some(&zk::Error::NoNode) => {
                    node.state = NodeState::Absent;
                    self.create_parents(node).await?;
                }
                Err(e) if is_transient(&e) && !session.state().is_terminated() => {}
                Err(e) => {
                    node.state = NodeState::Absent;
                    return Err(e);
                }
            }
        }
    }

    /// Looks for a node with our uuid after a create whose reply was lost.
    async fn find_own_node(&self, node: &mut QueuedNode) -> Result<bool, ZkError> {
        let session = node.session.clone();
        let client = &session.client;
        let children = match self
            .call("list", &node.dir, client.list_children(&node.dir))
            .await
        {
            Ok(children) => children,
            Err(e) if e.code() == Some(&zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(e),
        };
        let Some(name) = children.into_iter().find(|c| c.starts_with(&node.marker)) else {
            node.state = NodeState::Absent;
            return Ok(false);
        };
        let path = node.path_of(&name);
        match self.call("exists", &path, client.check_stat(&path)).await? {
            Some(stat) => {
                tracing::debug!(node = %path, "found our lock node after a connection loss");
                node.state = NodeState::Created {
                    name,
                    czxid: stat.czxid,
                };
                Ok(true)
            }
            None => {
                node.state = NodeState::Absent;
                Ok(false)
            }
        }
    }

    /// `mkdir -p` of the lock directory as container nodes, which the server
    /// deletes once their last child is gone.
    async fn create_parents(&self, node: &QueuedNode) -> Result<(), ZkError> {
        let options = CreateMode::Container.with_acls(Acls::new(&self.acls));
        match self
            .call(
                "mkdir",
                &node.dir,
                node.session.client.mkdir(&node.dir, &options),
            )
            .await
        {
            Err(e) if e.code() == Some(&zk::Error::NoNode) => Err(ZkError::Request {
                op: "mkdir",
                path: format!("{} (the chroot does not exist)", node.dir),
                source: zk::Error::NoNode,
            }),
            other => other,
        }
    }

    /// Lists the lock directory and finds our place in line.
    async fn place(&self, node: &QueuedNode) -> Result<Place, ZkError> {
        let NodeState::Created { name, .. } = &node.state else {
            return Ok(Place::Missing);
        };
        let children = match self
            .call(
                "list",
                &node.dir,
                node.session.client.list_children(&node.dir),
            )
            .await
        {
            Err(e) if e.code() == Some(&zk::Error::NoNode) => return Ok(Place::Missing),
            other => other?,
        };
        let queue = layout::sort_queue(children);
        Ok(match queue.iter().position(|child| child == name) {
            Some(0) => Place::First,
            Some(at) => Place::Behind(queue[at - 1].clone()),
            None => Place::Missing,
        })
    }

    /// Queues and waits until our node is first: `Some(sent_at)` of the list
    /// that found it first, `None` when it is not and `Wait::No` was asked.
    /// Errors and cancellation leave the node to `QueuedNode`'s drop, which
    /// deletes it.
    pub(crate) async fn queue_and_wait(
        &self,
        node: &mut QueuedNode,
        req: &AcquireRequest<'_>,
    ) -> Result<Option<Instant>, LockError> {
        let ended = node.session.ended();
        tokio::pin!(ended);
        loop {
            let error = match self.queue_step(node, req, &mut ended).await {
                Ok(Step::Won(sent_at)) => return Ok(Some(sent_at)),
                Ok(Step::Busy) => return Ok(None),
                Ok(Step::Again) => continue,
                Err(error) => error,
            };
            // A connection loss while the session lives is not the end of a wait:
            // the client reconnects and the node is still in line.
            if !is_transient(&error)
                || req.wait == WaitUntil::NoWait
                || node.session.state().is_terminated()
            {
                return Err(self.error(error));
            }
            tracing::debug!(%error, "retrying after a connection loss");
            tokio::select! {
                _ = tokio::time::sleep(RETRY_DELAY) => {}
                _ = &mut ended => return Err(self.error(node.session.ended_error("while waiting for the lock"))),
            }
        }
    }

    /// One round of the recipe: create if needed, list, and if not first, watch
    /// the predecessor until it changes.
    async fn queue_step(
        &self,
        node: &mut QueuedNode,
        req: &AcquireRequest<'_>,
        ended: &mut (impl Future<Output = zk::SessionState> + Unpin),
    ) -> Result<Step, ZkError> {
        if !matches!(node.state, NodeState::Created { .. }) {
            self.create_node(node).await?;
        }
        let sent_at = Instant::now();
        let predecessor = match self.place(node).await? {
            Place::First => return Ok(Step::Won(sent_at)),
            Place::Behind(_) if req.wait == WaitUntil::NoWait => return Ok(Step::Busy),
            Place::Behind(predecessor) => node.path_of(&predecessor),
            Place::Missing if node.session.state().is_terminated() => {
                return Err(node.session.ended_error("while waiting for the lock"));
            }
            // Deleted behind our back while we waited: queue again, as Curator does.
            Place::Missing => {
                node.state = NodeState::Absent;
                return Ok(Step::Again);
            }
        };
        let client = &node.session.client;
        let watcher = match self
            .call(
                "watch",
                &predecessor,
                client.get_and_watch_data(&predecessor),
            )
            .await
        {
            Ok((_, _, watcher)) => watcher,
            // Gone between the list and the watch: look again.
            Err(e) if e.code() == Some(&zk::Error::NoNode) => return Ok(Step::Again),
            Err(e) => return Err(e),
        };
        tokio::select! {
            _ = watcher.changed() => Ok(Step::Again),
            _ = ended => Err(node.session.ended_error("while waiting for the lock")),
        }
    }
}

/// What one round of the recipe found.
enum Step {
    Won(Instant),
    Busy,
    Again,
}

/// Errors after which the session may still be alive and a retry may succeed:
/// the connection failed (end of stream, a socket error, which the client wraps
/// as `Custom`, or no reply in time) or the server shed load. After such an error
/// a create's outcome is unknown.
fn is_transient(error: &ZkError) -> bool {
    matches!(
        error,
        ZkError::TimedOut { .. }
            | ZkError::Disconnected { .. }
            | ZkError::Request {
                source: zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Throttled,
                ..
            }
    )
}
