//! Concurrent rounds over all nodes: every request goes out at once, replies are
//! collected until the outcome is decided or the round's time is up.

use crate::error::NodeError;
use crate::node::Node;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One node's reply.
pub(crate) struct Reply<T> {
    /// Index of the node.
    pub node: usize,
    pub result: Result<T, NodeError>,
}

/// What to do with a reply nobody listens to any more (the round was decided or
/// abandoned): for an acquire, give back a lock it may have taken.
pub(crate) type Unheard<T> = Arc<
    dyn Fn(Arc<Node>, &Result<T, NodeError>) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>>
        + Send
        + Sync,
>;

/// Sends `op` to the nodes at `targets` at once. Each request runs to completion
/// in its own task even if the caller stops listening, so that `unheard` can
/// clean up after it in order on the same connection.
pub(crate) fn start<T, F, Fut>(
    nodes: &[Arc<Node>],
    targets: impl IntoIterator<Item = usize>,
    op: F,
    unheard: Option<Unheard<T>>,
) -> mpsc::UnboundedReceiver<Reply<T>>
where
    T: Send + 'static,
    F: Fn(Arc<Node>) -> Fut,
    Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
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

/// Starts `op` on `targets` and collects every reply, or until `deadline`.
pub(crate) async fn all<T, F, Fut>(
    nodes: &[Arc<Node>],
    targets: Vec<usize>,
    deadline: Instant,
    op: F,
) -> Vec<Reply<T>>
where
    T: Send + 'static,
    F: Fn(Arc<Node>) -> Fut,
    Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
{
    let expected = targets.len();
    let mut rx = start(nodes, targets, op, None);
    collect(&mut rx, expected, deadline, |_| false).await
}
