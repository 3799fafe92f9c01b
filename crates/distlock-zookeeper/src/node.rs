//! Our lock node while we wait for it ([`QueuedNode`]) and once it holds the lock
//! ([`ZkHandle`]). Both make sure that a node nobody owns any more is deleted:
//! a cancelled acquire deletes it at once, an abandoned lease when its ttl would
//! have run out.

use crate::session::Session;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What a ZooKeeper lock client keeps per held lock: the session and the node.
#[derive(Debug)]
pub struct ZkHandle {
    pub(crate) session: Arc<Session>,
    pub(crate) node: String,
    pub(crate) czxid: i64,
    pub(crate) ttl: Duration,
    /// When the last acquire or renewal that proved ownership was sent.
    pub(crate) valid_from: Mutex<Instant>,
    /// A release reached the server: nothing is left to clean up.
    pub(crate) settled: AtomicBool,
}

impl ZkHandle {
    /// The lock node's path (relative to the chroot).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The id of the session the node belongs to.
    pub fn session_id(&self) -> i64 {
        self.session.id()
    }

    pub(crate) fn renewed(&self, sent_at: Instant) {
        let mut valid_from = self
            .valid_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *valid_from = (*valid_from).max(sent_at);
    }
}

impl Drop for ZkHandle {
    /// A lease dropped without a release that reached the server (abandoned, or
    /// the release failed) would keep its node as long as the shared session lives,
    /// which may be forever. The ttl is the promise: delete the node when it would
    /// have expired. The node's name holds our uuid, so this never touches another
    /// holder's node.
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) || self.session.state().is_terminated() {
            return;
        }
        let valid_from = *self
            .valid_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let expires_at = valid_from + self.ttl;
        let (session, node) = (self.session.clone(), std::mem::take(&mut self.node));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep_until(expires_at.into()).await;
                    if let Err(error) = session.client.delete(&node, None).await {
                        tracing::debug!(%node, %error, "deleting an abandoned lock node failed");
                    }
                });
            }
            // No runtime to wait on: free it now rather than never.
            Err(_) => drop(session.client.delete(&node, None)),
        }
    }
}

/// Our node from the moment its create is sent until the lock is handed to the
/// caller. Dropping it (cancellation, timeout, error) deletes the node, also when
/// the create's reply never came: then the node is found by our uuid.
#[derive(Debug)]
pub(crate) struct QueuedNode {
    pub session: Arc<Session>,
    pub dir: String,
    /// `_c_{uuid}-`: every node of this acquisition starts with it.
    pub marker: String,
    /// The create prefix, `{dir}/_c_{uuid}-lock-`.
    pub prefix: String,
    pub state: NodeState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// No create sent yet, or the node is known to be gone.
    Absent,
    /// A create was sent and its outcome is unknown.
    Unknown,
    /// The node exists: its name (last segment) and czxid.
    Created { name: String, czxid: i64 },
}

impl QueuedNode {
    pub fn new(session: Arc<Session>, dir: String) -> Self {
        let uuid = uuid::Uuid::new_v4();
        QueuedNode {
            marker: format!("{}{uuid}-", crate::layout::PROTECTED_PREFIX),
            prefix: crate::layout::node_prefix(&dir, &uuid),
            session,
            dir,
            state: NodeState::Absent,
        }
    }

    pub fn path_of(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    /// Deletes our node now that the wait is over, so a process that exits right
    /// after a timeout leaves no queue entry behind. On failure the node stays
    /// owned, and dropping it tries again in the background.
    pub async fn withdraw(&mut self) {
        let NodeState::Created { name, .. } = &self.state else {
            return;
        };
        let path = self.path_of(name);
        match self.session.client.delete(&path, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => self.state = NodeState::Absent,
            Err(error) => tracing::debug!(%path, %error, "withdrawing a queue node failed"),
        }
    }

    /// Hands the node over to a lease: it is no longer deleted on drop.
    pub fn into_handle(mut self, ttl: Duration, sent_at: Instant) -> Option<ZkHandle> {
        let NodeState::Created { name, czxid } =
            std::mem::replace(&mut self.state, NodeState::Absent)
        else {
            return None;
        };
        Some(ZkHandle {
            session: self.session.clone(),
            node: self.path_of(&name),
            czxid,
            ttl,
            valid_from: Mutex::new(sent_at),
            settled: AtomicBool::new(false),
        })
    }
}

impl Drop for QueuedNode {
    fn drop(&mut self) {
        let client = &self.session.client;
        match std::mem::replace(&mut self.state, NodeState::Absent) {
            NodeState::Absent => {}
            NodeState::Created { name, .. } => {
                // The request goes out now, ahead of anything this session sends
                // later; only its reply is awaited in the background.
                let delete = client.delete(&self.path_of(&name), None);
                spawn_or_drop(async move {
                    if let Err(error) = delete.await {
                        tracing::debug!(%error, "deleting a cancelled queue node failed");
                    }
                });
            }
            NodeState::Unknown => {
                // Requests of one session are served in order, so this listing
                // sees the outcome of the create sent before it.
                let (client, dir, marker) = (client.clone(), self.dir.clone(), self.marker.clone());
                spawn_or_drop(async move {
                    let Ok(children) = client.list_children(&dir).await else {
                        return;
                    };
                    for child in children.iter().filter(|c| c.starts_with(&marker)) {
                        let _ = client.delete(&format!("{dir}/{child}"), None).await;
                    }
                });
            }
        }
    }
}

fn spawn_or_drop(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}
