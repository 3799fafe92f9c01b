//! The protocol's rounds on all nodes at once: the acquire vote, the fence
//! raise (only when the nodes won disagree), and the compare-owner renew or
//! release judged by majority.

use super::{RedlockBackend, RedlockHandle};
use crate::connection::RunId;
use crate::error::CommandError;
use crate::keys::LockKeys;
use crate::protocol::{Attempt, ServerClient};
use crate::redlock::round::{self, Round, Unheard};
use crate::redlock::tally::Tally;
use distlock_core::LockError;
use distlock_core::adapter::Ownership;
use distlock_core::toolkit::UndoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl RedlockBackend {
    /// Sends the acquire script to every node at once and counts the replies,
    /// stopping early once a majority can no longer be won. Replies that arrive
    /// after that give their lock back by themselves.
    pub(super) async fn acquire_round(
        &self,
        keys: &Arc<LockKeys>,
        owner: &Arc<str>,
        ttl: Duration,
        sent_at: Instant,
    ) -> Tally {
        let (n, quorum, budget) = (self.nodes.len(), self.quorum, self.timeout);
        let (k, o) = (keys.clone(), owner.clone());
        let unheard: Unheard<Attempt> = Arc::new(
            move |node: Arc<ServerClient>, result: &Result<Attempt, CommandError>| {
                let may_hold = matches!(result, Ok(Attempt::Won(..)))
                    || result.as_ref().is_err_and(CommandError::outcome_unknown);
                let (keys, owner) = (k.clone(), o.clone());
                may_hold.then(|| {
                    Box::pin(async move {
                        let _ = node.release(&keys, &owner, budget).await;
                    }) as UndoFuture
                })
            },
        );
        let (k, o, g) = (keys.clone(), owner.clone(), self.guard.clone());
        let op = move |node: Arc<ServerClient>| {
            let (keys, owner, guard) = (k.clone(), o.clone(), g.clone());
            async move {
                node.acquire(&keys, &owner, ttl, guard.as_ref(), budget)
                    .await
            }
        };
        let mut round = Round::start(&self.nodes, 0..n, op, Some(unheard));
        let deadline = (sent_at + budget).into();
        let collected = round
            .collect(deadline, |so_far| {
                let lost = so_far
                    .iter()
                    .filter(|r| !matches!(r.result, Ok(Attempt::Won(..))))
                    .count();
                lost > n - quorum
            })
            .await;
        drop(round);
        let timed_out = (tokio::time::Instant::now() >= deadline).then_some(budget);
        Tally::of(collected, &self.nodes, timed_out)
    }

    /// Makes sure a majority of nodes has a fence counter ≥ `token`, the largest
    /// token among the nodes won, and returns how many nodes are known to.
    ///
    /// Why the round exists: each node `INCR`s its own counter, so the nodes won
    /// can answer different tokens (counters drift apart when a lost attempt
    /// took a minority, or a node was down). The lease carries the largest, T.
    /// A later majority is only sure to meet a node whose counter is ≥ T if a
    /// majority has one; nodes that answered less are raised to T first.
    ///
    /// When it is skipped: a node's reply is its counter's value when the script
    /// ran, and counters never go down (`INCR`, and `raise_fence.lua` only
    /// raises; a counter collected once its name was idle restarts above the
    /// node's high-water, which the acquire and the raise lift with it; a node
    /// that loses its data is the durability assumption of the whole scheme). So a node that answered T already has a counter ≥ T, and
    /// when a quorum of the nodes won answered T the invariant holds as it is:
    /// no round. That is the common case, since an uncontended acquire `INCR`s
    /// every node's counter alike once they agree. Otherwise only the nodes won
    /// below T are raised.
    pub(super) async fn raise_fences(
        &self,
        keys: &Arc<LockKeys>,
        won: &[(usize, u64, RunId)],
        (token, ttl): (u64, Duration),
    ) -> usize {
        let at_token = won.iter().filter(|(_, t, _)| *t == token).count();
        if at_token >= self.quorum {
            return at_token;
        }
        let (budget, k) = (self.timeout, keys.clone());
        let below: Vec<usize> = won
            .iter()
            .filter(|(_, t, _)| *t < token)
            .map(|(node, _, _)| *node)
            .collect();
        let answers = round::on_all(&self.nodes, below, budget, move |node| {
            let keys = k.clone();
            async move { node.raise_fence(&keys, (token, ttl), budget).await }
        })
        .await;
        // Each node appears once in `won`, so the two sets do not overlap.
        at_token + answers.ok.len()
    }

    /// Runs a compare-owner script on every node and judges ownership by majority.
    pub(super) async fn on_majority(
        &self,
        handle: &RedlockHandle,
        renew_ttl: Option<Duration>,
    ) -> Result<(Ownership, Instant), LockError> {
        let budget = self.timeout;
        let sent_at = Instant::now();
        let (k, o) = (handle.keys.clone(), handle.owner.clone());
        let answers = round::on_all(&self.nodes, self.all_nodes(), budget, move |node| {
            let (keys, owner) = (k.clone(), o.clone());
            async move {
                match renew_ttl {
                    Some(ttl) => node.renew(&keys, &owner, ttl, budget).await,
                    None => node.release(&keys, &owner, budget).await,
                }
            }
        })
        .await;
        let held = answers.ok.iter().filter(|(_, held)| *held).count();
        let unknown = self.nodes.len() - answers.ok.len();
        if held >= self.quorum {
            return Ok((Ownership::Held, sent_at));
        }
        if held + unknown < self.quorum {
            return Ok((Ownership::NotHeld, sent_at));
        }
        Err(self.quorum_unavailable(answers.ok.len(), answers.failed.join("; ")))
    }
}
