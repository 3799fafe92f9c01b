//! The wait for a lock: our node in the lock directory's queue, and the loop that
//! waits for it to come first.
//!
//! Invariant: the holder is the lock node first in sequence order under the lock
//! directory. Each acquisition creates one ephemeral-sequential node, lists the
//! directory, and either holds (first), gives up (`Wait::No`), or watches only the
//! node just before its own and lists again when that one goes. No herd: a release
//! wakes exactly one waiter.
//!
//! From the moment its create is sent until the lock is handed to the caller, the
//! node is owned by a [`CancelGuard`]: a cancelled, timed-out or failed acquire
//! deletes it, also when the create's reply never came (then it is found by our
//! uuid), so it never sits in the queue ahead of everyone.

use crate::error::ZkError;
use crate::keys;
use crate::protocol::{self, OwnNode, Requests};
use crate::session::Session;
use distlock_core::backend::WaitUntil;
use distlock_core::toolkit::{Backoff, CancelGuard, UndoFuture};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// Pauses before retrying after a connection loss (requests issued while
/// disconnected wait for the reconnect anyway).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(1);

/// What a waiter whose session ended is told.
const WAITING: &str = "while waiting for the lock";

/// Where our node is, as far as we know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// No create sent yet, or the node is known to be gone.
    Absent,
    /// A create was sent and its outcome is unknown.
    Unknown,
    /// The node exists.
    Created(OwnNode),
}

/// One acquisition's place in the queue.
#[derive(Debug)]
pub(crate) struct QueuedNode {
    pub session: Arc<Session>,
    pub dir: String,
    /// `_c_{uuid}-`: every node of this acquisition starts with it.
    marker: String,
    state: NodeState,
}

/// A queued node that is deleted if dropped before [`CancelGuard::disarm`].
pub(crate) type Queued = CancelGuard<QueuedNode, fn(QueuedNode) -> Option<UndoFuture>>;

/// Starts an acquisition of the lock directory `dir` on `session`. Its uuid is
/// the protected-mode marker Curator's clients recognise.
pub(crate) fn enqueue(session: Arc<Session>, dir: String) -> Queued {
    let node = QueuedNode {
        marker: keys::protected_marker(&uuid::Uuid::new_v4()),
        session,
        dir,
        state: NodeState::Absent,
    };
    CancelGuard::new(node, undo)
}

/// Deletes what an abandoned acquisition left: at once when the node's path is
/// known (the delete goes out ahead of anything this session sends later),
/// otherwise by looking for our uuid.
fn undo(node: QueuedNode) -> Option<UndoFuture> {
    let client = &node.session.client;
    match node.state {
        NodeState::Absent => None,
        NodeState::Created(own) => Some(protocol::delete_at_once(
            client,
            &keys::node_path(&node.dir, &own.name),
        )),
        NodeState::Unknown => Some(protocol::delete_own_nodes(client, node.dir, node.marker)),
    }
}

/// Queues and waits until our node is first: `Some` with the node and when the
/// list that found it first was sent, `None` when it is not first and the wait is
/// over (`Wait::No`, or the deadline passed while retrying). Errors leave the
/// node to the guard, which deletes it.
pub(crate) async fn wait_for_turn(
    requests: &Requests,
    node: &mut QueuedNode,
    wait: WaitUntil,
) -> Result<Option<(Instant, OwnNode)>, ZkError> {
    let ended = node.session.ended();
    tokio::pin!(ended);
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        let error = match step(requests, node, wait, &mut ended).await {
            Ok(Step::Won(sent_at, own)) => return Ok(Some((sent_at, own))),
            Ok(Step::Busy) => return Ok(None),
            Ok(Step::Again) => {
                backoff.reset();
                continue;
            }
            Err(error) => error,
        };
        // A connection loss while the session lives is not the end of a wait:
        // the client reconnects and the node is still in line.
        if !error.is_transient()
            || wait == WaitUntil::NoWait
            || node.session.state().is_terminated()
        {
            return Err(error);
        }
        tracing::debug!(%error, "retrying after a connection loss");
        tokio::select! {
            more = backoff.pause(Duration::MAX, wait) => if !more {
                return Ok(None);
            },
            _ = &mut ended => return Err(node.session.ended_error(WAITING)),
        }
    }
}

/// Deletes our node now that the wait is over, so a process that exits right
/// after a timeout leaves no queue entry behind. On failure the node stays with
/// the guard, which tries again in the background.
pub(crate) async fn withdraw(requests: &Requests, node: &mut QueuedNode) {
    let NodeState::Created(own) = &node.state else {
        return;
    };
    let path = keys::node_path(&node.dir, &own.name);
    match requests.delete_node(&node.session.client, &path).await {
        Ok(_) => node.state = NodeState::Absent,
        Err(error) => tracing::debug!(%path, %error, "withdrawing a queue node failed"),
    }
}

/// What one round of the recipe found.
enum Step {
    Won(Instant, OwnNode),
    Busy,
    Again,
}

/// One round of the recipe: create if needed, list, and if not first, watch the
/// predecessor until it changes.
async fn step(
    requests: &Requests,
    node: &mut QueuedNode,
    wait: WaitUntil,
    ended: &mut (impl Future<Output = zk::SessionState> + Unpin),
) -> Result<Step, ZkError> {
    let own = match &node.state {
        NodeState::Created(own) => own.clone(),
        _ => create(requests, node).await?,
    };
    let client = &node.session.client;
    let sent_at = Instant::now();
    let queue = requests
        .list_queue(client, &node.dir)
        .await?
        .unwrap_or_default();
    let predecessor = match queue.iter().position(|child| *child == own.name) {
        Some(0) => return Ok(Step::Won(sent_at, own)),
        Some(_) if wait == WaitUntil::NoWait => return Ok(Step::Busy),
        Some(at) => keys::node_path(&node.dir, &queue[at - 1]),
        None if node.session.state().is_terminated() => {
            return Err(node.session.ended_error(WAITING));
        }
        // Deleted behind our back while we waited: queue again, as Curator does.
        None => {
            node.state = NodeState::Absent;
            return Ok(Step::Again);
        }
    };
    // Gone between the list and the watch: look again.
    let Some(watcher) = requests.watch_node(client, &predecessor).await? else {
        return Ok(Step::Again);
    };
    tokio::select! {
        _ = watcher.changed() => Ok(Step::Again),
        _ = ended => Err(node.session.ended_error(WAITING)),
    }
}

/// Creates our node, recreating a missing lock directory, and after a
/// connection loss finds the node by our uuid instead of creating a second one
/// (Curator's protected mode).
async fn create(requests: &Requests, node: &mut QueuedNode) -> Result<OwnNode, ZkError> {
    let session = node.session.clone();
    let client = &session.client;
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        // A create whose outcome we never learned may have made our node.
        if node.state == NodeState::Unknown {
            if let Some(own) = requests
                .find_own_node(client, &node.dir, &node.marker)
                .await?
            {
                tracing::debug!(dir = %node.dir, node = %own.name, "found our lock node after a connection loss");
                node.state = NodeState::Created(own.clone());
                return Ok(own);
            }
            node.state = NodeState::Absent;
        }
        node.state = NodeState::Unknown;
        match requests
            .create_lock_node(client, &node.dir, &node.marker)
            .await
        {
            Ok(own) => {
                node.state = NodeState::Created(own.clone());
                return Ok(own);
            }
            // The directory is missing (first use, or container cleanup won a
            // race with us): recreate it and try again.
            Err(e) if e.code() == Some(&zk::Error::NoNode) => {
                node.state = NodeState::Absent;
                requests.create_lock_dir(client, &node.dir).await?;
            }
            Err(e) if e.is_transient() && !session.state().is_terminated() => {
                tracing::debug!(error = %e, "retrying a create after a connection loss");
                backoff.pause(Duration::MAX, WaitUntil::Forever).await;
            }
            Err(e) => {
                node.state = NodeState::Absent;
                return Err(e);
            }
        }
    }
}
