//! Counting one acquire round's votes.

use super::round::{Reply, describe};
use crate::connection::RunId;
use crate::error::CommandError;
use crate::protocol::{Attempt, ServerClient};
use std::sync::Arc;
use std::time::Duration;

/// What one acquire round found.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Nodes won, with their tokens and the server process that granted them.
    pub won: Vec<(usize, u64, RunId)>,
    /// Nodes held elsewhere, with the holder's remaining ttl.
    pub held: Vec<(usize, i64)>,
    /// Nodes that failed, and why (naming the node).
    pub failed: Vec<(usize, String)>,
    /// How many of the failures were timeouts (slow nodes, which may answer the
    /// next round) rather than refusals.
    pub timeouts: usize,
}

impl Tally {
    /// Sorts `replies`. Nodes that did not reply count as failed when the round
    /// ran out of time; after an early decision they are merely unknown.
    pub fn of(
        replies: Vec<Reply<Attempt>>,
        nodes: &[Arc<ServerClient>],
        timed_out: Option<Duration>,
    ) -> Self {
        let mut tally = Tally::default();
        let mut answered = vec![false; nodes.len()];
        for reply in replies {
            if let Some(seen) = answered.get_mut(reply.node) {
                *seen = true;
            }
            match reply.result {
                Ok(Attempt::Won(token, run_id)) => tally.won.push((reply.node, token, run_id)),
                Ok(Attempt::Held(pttl)) => tally.held.push((reply.node, pttl)),
                Err(e) => {
                    tally.timeouts += usize::from(matches!(e, CommandError::Timeout(_)));
                    tally
                        .failed
                        .push((reply.node, describe(nodes, reply.node, e)));
                }
            }
        }
        if let Some(after) = timed_out {
            for (index, _) in answered.iter().enumerate().filter(|(_, seen)| !**seen) {
                tally.timeouts += 1;
                tally
                    .failed
                    .push((index, describe(nodes, index, CommandError::Timeout(after))));
            }
        }
        tally
    }

    /// The highest token among the nodes won.
    pub fn max_token(&self) -> Option<u64> {
        self.won.iter().map(|(_, token, _)| *token).max()
    }

    /// Nodes not known to have failed.
    pub fn reachable(&self, nodes: usize) -> usize {
        nodes.saturating_sub(self.failed.len())
    }

    /// Nodes that answered or were merely slow: not down, refusing or rejecting us.
    pub fn not_refusing(&self, nodes: usize) -> usize {
        nodes.saturating_sub(self.failed.len() - self.timeouts)
    }

    /// The shortest remaining ttl among the holders, or -2 (look again at once)
    /// when nobody reported one.
    pub fn shortest_pttl(&self) -> i64 {
        let known = self.held.iter().map(|(_, pttl)| *pttl);
        let finite = known.clone().filter(|p| *p >= 0).min();
        finite.or_else(|| known.min()).unwrap_or(-2)
    }

    /// Each failed node and why, for `QuorumUnavailable`.
    pub fn failures(&self) -> String {
        let parts: Vec<&str> = self.failed.iter().map(|(_, why)| why.as_str()).collect();
        parts.join("; ")
    }
}
