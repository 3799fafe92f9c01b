//! Concurrent rounds over all nodes: every request goes out at once, replies are
//! collected until the outcome is decided or the round's time is up, and a node
//! that failed or stayed silent is named in what the user reads.
//!
//! The task that waits for a round polls its requests itself: no task per node.
//! Requests still in flight when the round is dropped (decided early, out of
//! time, or its caller gave up) go to one task that runs them to completion, so
//! that none is cut off mid-reply (which would cost its connection) and
//! `unheard` can clean up after each, in order on the same connection.

use super::BACKEND;
use crate::error::CommandError;
use crate::protocol::ServerClient;
use distlock_core::toolkit::UndoFuture;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
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

/// One node's request in flight.
struct Request<Fut> {
    node: usize,
    client: Arc<ServerClient>,
    future: Pin<Box<Fut>>,
}

/// The requests of one round that have not answered yet.
pub(crate) struct Round<T, Fut>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, CommandError>> + Send + 'static,
{
    pending: Vec<Request<Fut>>,
    unheard: Option<Unheard<T>>,
}

impl<T, Fut> Round<T, Fut>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, CommandError>> + Send + 'static,
{
    /// Prepares `op` for the nodes at `targets`; the requests go out together
    /// when [`Round::collect`] first polls them.
    pub fn start(
        nodes: &[Arc<ServerClient>],
        targets: impl IntoIterator<Item = usize>,
        op: impl Fn(Arc<ServerClient>) -> Fut,
        unheard: Option<Unheard<T>>,
    ) -> Self {
        let pending = targets
            .into_iter()
            .filter_map(|node| {
                let client = nodes.get(node)?.clone();
                let future = Box::pin(op(client.clone()));
                Some(Request {
                    node,
                    client,
                    future,
                })
            })
            .collect();
        Round { pending, unheard }
    }

    /// Collects replies until every request answered, `decided` holds, or
    /// `deadline`.
    pub async fn collect(
        &mut self,
        deadline: Instant,
        mut decided: impl FnMut(&[Reply<T>]) -> bool,
    ) -> Vec<Reply<T>> {
        let mut replies = Vec::with_capacity(self.pending.len());
        let pending = &mut self.pending;
        let replied = async {
            while !pending.is_empty() && !decided(&replies) {
                let (request, result) = poll_fn(|cx| next(pending, cx)).await;
                replies.push(Reply {
                    node: request.node,
                    result,
                });
            }
        };
        // Out of time: the replies so far are the round's.
        let _ = tokio::time::timeout_at(deadline, replied).await;
        replies
    }
}

impl<T, Fut> Drop for Round<T, Fut>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, CommandError>> + Send + 'static,
{
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let unheard = finish(std::mem::take(&mut self.pending), self.unheard.take());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(unheard)),
            Err(_) => tracing::debug!(
                "a round was dropped with no runtime to finish its requests; the ttl frees what they took"
            ),
        }
    }
}

/// Polls every pending request and takes out the first that answered.
fn next<Fut: Future>(
    pending: &mut Vec<Request<Fut>>,
    cx: &mut Context<'_>,
) -> Poll<(Request<Fut>, Fut::Output)> {
    for index in 0..pending.len() {
        if let Poll::Ready(result) = pending[index].future.as_mut().poll(cx) {
            return Poll::Ready((pending.swap_remove(index), result));
        }
    }
    Poll::Pending
}

/// Runs the requests nobody listens to any more to completion, with what
/// `unheard` makes of each reply.
async fn finish<T, Fut>(mut pending: Vec<Request<Fut>>, unheard: Option<Unheard<T>>)
where
    Fut: Future<Output = Result<T, CommandError>>,
{
    let mut cleanups: Vec<UndoFuture> = Vec::new();
    poll_fn(|cx| {
        while let Poll::Ready((request, result)) = next(&mut pending, cx) {
            if let Some(cleanup) = unheard.as_ref().and_then(|f| f(request.client, &result)) {
                cleanups.push(cleanup);
            }
        }
        cleanups.retain_mut(|cleanup| cleanup.as_mut().poll(cx).is_pending());
        match pending.is_empty() && cleanups.is_empty() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    })
    .await;
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
    let deadline = Instant::now() + patience;
    let mut round = Round::start(nodes, targets.iter().copied(), op, None);
    let replies = round.collect(deadline, |_| false).await;
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
