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
use crate::keys::{self, NodeKind};
use crate::protocol::{self, OwnNode, Requests};
use crate::session::Session;
use distlock_core::adapter::WaitUntil;
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
    /// Which recipe's node: its base name and whom it waits for.
    kind: NodeKind,
    /// What the node holds (a candidate's proposal, a permit's slot).
    data: Vec<u8>,
    /// `_c_{uuid}-`: every node of this acquisition starts with it.
    marker: String,
    state: NodeState,
}

/// A queued node that is deleted if dropped before [`CancelGuard::disarm`].
pub(crate) type Queued = CancelGuard<QueuedNode, fn(QueuedNode) -> Option<UndoFuture>>;

/// Starts an acquisition of a node of `kind` holding `data` in the directory
/// `dir` on `session`. Its uuid is the protected-mode marker Curator's clients
/// recognise.
pub(crate) fn enqueue(session: Arc<Session>, dir: String, kind: NodeKind, data: Vec<u8>) -> Queued {
    enqueue_as(uuid::Uuid::new_v4(), session, dir, kind, data)
}

/// [`enqueue`] with the uuid of the node's protected name given (a permit's
/// says its slot).
pub(crate) fn enqueue_as(
    uuid: uuid::Uuid,
    session: Arc<Session>,
    dir: String,
    kind: NodeKind,
    data: Vec<u8>,
) -> Queued {
    let node = QueuedNode {
        marker: keys::protected_marker(&uuid),
        session,
        dir,
        kind,
        data,
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
///
/// With `also`, the children of that directory are listed right behind every
/// listing of the queue, in the same round trip; the turn carries the listing
/// sent behind the one that found us first.
pub(crate) async fn wait_for_turn(
    requests: &Requests,
    node: &mut QueuedNode,
    wait: WaitUntil,
    also: Option<&str>,
) -> Result<Option<Turn>, ZkError> {
    let ended = node.session.ended();
    tokio::pin!(ended);
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        let error = match step(requests, node, wait, also, &mut ended).await {
            Ok(Step::Won(turn)) => return Ok(Some(turn)),
            Ok(Step::Busy) => return Ok(None),
            Ok(Step::Again) => {
                backoff.reset();
                continue;
            }
            Err(error) => error,
        };
        // A connection loss while the session lives is not the end of a wait:
        // the client reconnects and the node is still in line.
        if !error.is_transient() || wait == WaitUntil::No || node.session.state().is_terminated() {
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

/// Our node is first in line (nothing blocks it).
#[derive(Debug)]
pub(crate) struct Turn {
    /// When the listing that found it first was sent.
    pub sent_at: Instant,
    pub own: OwnNode,
    /// The children of the `also` directory, listed behind that listing
    /// (empty when it does not exist or was not asked for).
    pub also: Vec<String>,
}

/// What one round of the recipe found.
enum Step {
    Won(Turn),
    Busy,
    Again,
}

/// One round of the recipe: create if needed, list, and if not first, watch the
/// predecessor until it changes.
async fn step(
    requests: &Requests,
    node: &mut QueuedNode,
    wait: WaitUntil,
    also: Option<&str>,
    ended: &mut (impl Future<Output = zk::SessionState> + Unpin),
) -> Result<Step, ZkError> {
    let sent_at = Instant::now();
    let (own, listed) = match (&node.state, also) {
        (NodeState::Created(own), _) => (own.clone(), None),
        // A first create and the listing behind it, in one round trip: a
        // session's requests are served in order, so the listing sees the node.
        (_, None) => {
            let (client, dir, kinds) = (node.session.client.clone(), node.dir.clone(), node.kind);
            let listing = requests.list_queue(&client, &dir, kinds.queue());
            let (own, listed) = tokio::join!(create(requests, node), listing);
            (own?, listed.ok().flatten())
        }
        (_, Some(_)) => (create(requests, node).await?, None),
    };
    let client = &node.session.client;
    // A listing sent before a create that had to be retried (a missing
    // directory, a lost reply) may not show the node: list again.
    let listed = listed.filter(|queue| queue.contains(&own.name));
    let (queue, also) = match (listed, also) {
        (Some(queue), _) => (Some(queue), None),
        (None, None) => (
            requests
                .list_queue(client, &node.dir, node.kind.queue())
                .await?,
            None,
        ),
        // Joined, both requests go out before either reply is awaited, in order.
        (None, Some(dir)) => {
            let listing = requests.list_queue(client, &node.dir, node.kind.queue());
            let (queue, also) = tokio::join!(listing, requests.children(client, dir));
            (queue?, also?)
        }
    };
    let queue = queue.unwrap_or_default();
    let Some(at) = queue.iter().position(|child| *child == own.name) else {
        if node.session.state().is_terminated() {
            return Err(node.session.ended_error(WAITING));
        }
        // Deleted behind our back while we waited: queue again, as Curator does.
        node.state = NodeState::Absent;
        return Ok(Step::Again);
    };
    let Some(blocking) = blocker(&queue, at, node.kind) else {
        return Ok(Step::Won(Turn {
            sent_at,
            own,
            also: also.unwrap_or_default(),
        }));
    };
    if wait == WaitUntil::No {
        return Ok(Step::Busy);
    }
    let predecessor = keys::node_path(&node.dir, &queue[blocking]);
    // Gone between the list and the watch: look again.
    let Some(watcher) = requests.watch_node(client, &predecessor).await? else {
        return Ok(Step::Again);
    };
    tokio::select! {
        _ = watcher.changed() => Ok(Step::Again),
        _ = ended => Err(node.session.ended_error(WAITING)),
    }
}

/// The node of `queue` that keeps the one at `at` from holding, if any, the
/// only one it watches: a reader waits for the newest writer before it
/// (Curator's readers share with every reader), everyone else for the node
/// just before it, so a release wakes only the waiter it unblocks.
fn blocker(queue: &[String], at: usize, kind: NodeKind) -> Option<usize> {
    let earlier = queue.get(..at)?;
    match kind {
        NodeKind::Read => earlier
            .iter()
            .rposition(|n| NodeKind::of(n, &[NodeKind::Write]).is_some()),
        _ => at.checked_sub(1),
    }
}

/// Creates our node, recreating a missing lock directory, and after a
/// connection loss finds the node by our uuid instead of creating a second one
/// (Curator's protected mode).
pub(crate) async fn create(requests: &Requests, node: &mut QueuedNode) -> Result<OwnNode, ZkError> {
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
        let (dir, marker, kind, data) = (&node.dir, &node.marker, node.kind, &node.data);
        let created = requests.create_node(client, dir, marker, kind, data).await;
        match created {
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
