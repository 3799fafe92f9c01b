//! Inspecting a Redlock: every question goes to all nodes at once, and the
//! answer is what a majority says (a lock is held when a majority holds its key).

use super::backend::RedlockBackend;
use super::round::{self, Answers};
use crate::inspect::{Role, ping, requests_served, server_pitfalls};
use crate::keys::{LockKeys, lock_key_pattern, state_key_pattern};
use crate::primaries::scan_keys;
use crate::protocol::Attempt;
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect, random_owner};
use distlock_core::{FencingToken, LockError, LockKey};
use std::collections::BTreeMap;
use std::time::Duration;

impl RedlockBackend {
    /// Fails unless a majority answered: fewer cannot say what the lock is.
    fn majority<T>(&self, answers: &Answers<T>) -> Result<(), LockError> {
        if answers.ok.len() < self.quorum {
            return Err(self.quorum_unavailable(answers.ok.len(), answers.failed.join("; ")));
        }
        Ok(())
    }

    /// The keys matching `pattern` on each node, from every node: a node that
    /// did not answer may hold what is asked for, so it fails the question.
    async fn scan_every_node(
        &self,
        pattern: String,
    ) -> Result<Vec<(usize, Vec<String>)>, LockError> {
        let budget = self.timeout;
        let answers = round::on_all(&self.nodes, self.all_nodes(), budget * 4, move |node| {
            let pattern = pattern.clone();
            async move { scan_keys(&node, &pattern, budget).await }
        })
        .await;
        if !answers.failed.is_empty() {
            return Err(self.quorum_unavailable(answers.ok.len(), answers.failed.join("; ")));
        }
        Ok(answers.ok)
    }
}

#[async_trait]
impl Inspect for RedlockBackend {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let (keys, budget) = (LockKeys::new(&self.namespace, key), self.timeout);
        let answers = round::on_all(&self.nodes, self.all_nodes(), budget, move |node| {
            let keys = keys.clone();
            async move { node.recorded(&keys, budget).await }
        })
        .await;
        self.majority(&answers)?;
        let mut by_owner: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for (_, recorded) in answers.ok {
            if let Some(owner) = recorded.owner.clone() {
                by_owner.entry(owner).or_default().push(recorded);
            }
        }
        let Some((owner, mut nodes)) = by_owner
            .into_iter()
            .find(|(_, nodes)| nodes.len() >= self.quorum)
        else {
            return Ok(None);
        };
        // Held while a majority keeps the key: until the quorum-th longest expiry.
        nodes.sort_by_key(|r| std::cmp::Reverse(r.expires_in()));
        Ok(Some(Holder::from_tagged(
            &owner,
            nodes
                .iter()
                .filter_map(|r| r.fence)
                .max()
                .map(FencingToken::new),
            nodes.get(self.quorum - 1).and_then(|r| r.expires_in()),
        )))
    }

    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let on_nodes = self.scan_every_node(state_key_pattern(&self.namespace, prefix));
        Ok(Some(
            on_nodes.await?.iter().map(|(_, keys)| keys.len()).sum(),
        ))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let on_nodes = self.scan_every_node(lock_key_pattern(&self.namespace, prefix));
        let answers = on_nodes.await?;
        let mut held_on: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for (node, keys) in &answers {
            for key in keys {
                held_on
                    .entry(key.clone())
                    .or_default()
                    .push(&self.nodes[*node].endpoint);
            }
        }
        Ok(held_on
            .into_iter()
            .map(|(key, nodes)| format!("{key} on {}", nodes.join(", ")))
            .collect())
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let (keys, budget) = (LockKeys::new(&self.namespace, key), self.timeout);
        let answers = round::on_all(&self.nodes, self.all_nodes(), budget, move |node| {
            let keys = keys.clone();
            async move { node.delete_holder(&keys, budget).await }
        })
        .await;
        self.majority(&answers)?;
        Ok(answers.ok.iter().any(|(_, deleted)| *deleted))
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let (budget, guarded) = (self.timeout, self.guard.is_some());
        let answers =
            round::on_all(
                &self.nodes,
                self.all_nodes(),
                budget * 4,
                move |node| async move {
                    server_pitfalls(&node, budget, Role::RedlockNode, guarded).await
                },
            )
            .await;
        let n = self.nodes.len();
        let mut warnings = Vec::new();
        if n < 3 || n.is_multiple_of(2) {
            warnings.push(format!(
                "{n} nodes: use an odd number, at least 3 (N nodes tolerate (N-1)/2 failures)"
            ));
        }
        warnings.extend(answers.ok.into_iter().flat_map(|(_, found)| found));
        warnings.extend(
            answers
                .failed
                .into_iter()
                .map(|failure| format!("cannot check a node's settings: {failure}")),
        );
        Ok(warnings)
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some("PING to all nodes")
    }

    fn floor(&self) -> Option<Floor> {
        Some(Floor {
            name: "acquire.lua, then release.lua, on every node at once (2 parallel rounds)",
            requests: 2 * u32::try_from(self.nodes.len()).unwrap_or(u32::MAX / 2),
        })
    }

    /// Redlock without the fence round, as the algorithm is usually written (and
    /// as `rslock` runs it): one round of acquires, then one of releases.
    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let (keys, owner) = (LockKeys::new(&self.namespace, key), random_owner());
        let (budget, guard) = (self.timeout, self.guard.clone());
        let (k, o) = (keys.clone(), owner.clone());
        let acquired = round::on_all(&self.nodes, self.all_nodes(), budget, move |node| {
            let (keys, owner, guard) = (k.clone(), o.clone(), guard.clone());
            async move {
                node.acquire(&keys, &owner, ttl, guard.as_ref(), budget)
                    .await
            }
        })
        .await;
        let won = acquired
            .ok
            .iter()
            .filter(|(_, attempt)| matches!(attempt, Attempt::Won(..)))
            .count();
        let released = round::on_all(&self.nodes, self.all_nodes(), budget, move |node| {
            let (keys, owner) = (keys.clone(), owner.clone());
            async move { node.release(&keys, &owner, budget).await }
        })
        .await;
        self.majority(&acquired)?;
        self.majority(&released)?;
        match won >= self.quorum {
            true => Ok(()),
            false => Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            }),
        }
    }

    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        let budget = self.timeout;
        let answers = round::on_all(
            &self.nodes,
            self.all_nodes(),
            budget,
            move |node| async move { requests_served(&node, budget).await },
        )
        .await;
        // A node missing from the sum would make the count meaningless.
        if !answers.failed.is_empty() {
            return Err(self.quorum_unavailable(answers.ok.len(), answers.failed.join("; ")));
        }
        Ok(Some(answers.ok.iter().map(|(_, served)| served).sum()))
    }

    async fn ping(&self) -> Result<(), LockError> {
        let budget = self.timeout;
        let answers = round::on_all(
            &self.nodes,
            self.all_nodes(),
            budget,
            move |node| async move { ping(&node, budget).await },
        )
        .await;
        self.majority(&answers)
    }
}
