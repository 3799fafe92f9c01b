//! Concurrent rounds over all nodes: every request goes out at once, replies are
//! collected until the outcome is decided or the round's time is up, and a node
//! that failed or stayed silent is named in what the user reads.

use super::BACKEND;
use crate::error::CommandError;
use crate::protocol::ServerClient;
use distlock_core::toolkit::UndoFuture;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One node's reply.
pub(crate) struct Reply<T> {
    /// Index of the node.
    pub node: usize,
    pub result: Result<T, CommandError>,
}

/// What to do with a reply nobody listens to any more (the round was decided or
/// abandoned): for an acquire, give back a lock it may have taken.
pub(crate) type Unheard<T> =
    Arc<dyn Fn(Arc<ServerClient>, &Result<T, CommandError>) -> Option<UndoFuture> + Send + Sync>;

/// Sends `op` to the nodes at `targets` at once. Each request runs to completion
/// in its own task even if the caller stops listening, so that `unheard` can
/// clean up after it in order on the same connection.
pub(crate) fn start<T, F, Fut>(
    nodes: &[Arc<ServerClient>],
    targets: impl IntoIterator<Item = usize>,
    op: F,
    unheard: Option<Unheard<T>>,
) -> mpsc::UnboundedReceiver<Reply<T>>
where
    T: Send + 'static,
    F: Fn(Arc<ServerClient>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    for index in targets {
        let Some(node) = nodes.get(index).cloned() else {
            continue;
        };
        let request = op(node.clone());
        let (tx, unheard) = (tx.clone(), unheard.clone());
        tokio::spawn(async move {
            let result = request.await;
            if let Err(mpsc::error::SendError(reply)) = tx.send(Reply {
                node: index,
                result,
            }) && let Some(cleanup) = unheard.and_then(|f| f(node, &reply.result))
            {
                cleanup.await;
            }
        });
    }
    rx
}

/// Collects replies until `expected` arrived, `decided` holds, or `deadline`.
pub(crate) async fn collect<T>(
    rx: &mut mpsc::UnboundedReceiver<Reply<T>>,
    expected: usize,
    deadline: Instant,
    mut decided: impl FnMut(&[Reply<T>]) -> bool,
) -> Vec<Reply<T>> {
    let mut replies = Vec::with_capacity(expected);
    while replies.len() < expected && !decided(&replies) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(reply)) => replies.push(reply),
            Ok(None) | Err(_) => break,
        }
    }
    replies
}

/// The replies of a round where each node either answered or failed.
#[derive(Debug)]
pub(crate) struct Answers<T> {
    /// Nodes that answered, with their answers.
    pub ok: Vec<(usize, T)>,
    /// Each node that failed or did not reply, and why (naming the node).
    pub failed: Vec<String>,
}

/// Sends `op` to the nodes at `targets` at once and sorts the replies that come
/// within `patience`; a target that did not reply by then counts as failed.
pub(crate) async fn on_all<T, F, Fut>(
    nodes: &[Arc<ServerClient>],
    targets: Vec<usize>,
    patience: Duration,
    op: F,
) -> Answers<T>
where
    T: Send + 'static,
    F: Fn(Arc<ServerClient>) -> Fut,
    Fut: Future<Output = Result<T, CommandError>> + Send + 'static,
{
    let (expected, deadline) = (targets.len(), Instant::now() + patience);
    let mut rx = start(nodes, targets.iter().copied(), op, None);
    let replies = collect(&mut rx, expected, deadline, |_| false).await;
    let mut answers = Answers {
        ok: Vec::new(),
        failed: Vec::new(),
    };
    let mut silent = targets;
    for reply in replies {
        silent.retain(|node| *node != reply.node);
        match reply.result {
            Ok(answer) => answers.ok.push((reply.node, answer)),
            Err(e) => answers.failed.push(describe(nodes, reply.node, e)),
        }
    }
    for node in silent {
        let e = CommandError::Timeout(patience);
        answers.failed.push(describe(nodes, node, e));
    }
    answers
}

/// A node's error as a user reads it: the node's endpoint and what to do.
pub(crate) fn describe(nodes: &[Arc<ServerClient>], index: usize, e: CommandError) -> String {
    let endpoint = nodes.get(index).map_or("?", |n| &n.endpoint);
    format!("{endpoint}: {}", e.into_lock_error(BACKEND, endpoint))
}
