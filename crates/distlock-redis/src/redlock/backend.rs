//! `Redlock`: acquire on a majority of N independent nodes, in one concurrent
//! round, then raise the fence counters of the nodes won to the token handed out.
//!
//! Invariant (fencing): before a lease with token T is returned, a majority of
//! nodes have a fence counter ≥ T. Any later winner holds a majority too, which
//! meets one of those nodes, whose `INCR` then gives more than T; so later tokens
//! are greater, as long as nodes keep their counters (see the docs).

use super::config::BACKEND;
use super::round::{self, Unheard};
use super::tally::{Tally, describe};
use crate::error::NodeError;
use crate::keys::LockKeys;
use crate::lock::{nap, new_owner};
use crate::node::{Attempt, Node, ReleaseOnDrop};
use crate::subscriber::{Registration, Signal};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::{
    AcquireOptions, BackendLock, Capabilities, FencingGuarantee, FencingToken, LockError,
    TokenDurability, Wake, clock_drift,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Redlock client: [`crate::RedlockConfig::connect`] gives one.
pub type Redlock = BackendLock<RedlockBackend>;

/// The Redlock adapter; reach it through [`BackendLock::backend`].
pub struct RedlockBackend {
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) quorum: usize,
    pub(super) namespace: String,
    pub(super) default_ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) retry_delay: Duration,
    /// How long nodes may stay too slow for a majority before a waiting acquire
    /// gives up on them (the connect timeout).
    pub(super) slow_grace: Duration,
}

impl std::fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("nodes", &self.nodes)
            .field("quorum", &self.quorum)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What a Redlock client keeps per held lock.
#[derive(Debug)]
pub struct RedlockHandle {
    keys: LockKeys,
    owner: String,
}

/// What Redlock guarantees.
pub(crate) fn capabilities() -> Capabilities {
    RedlockBackend::CAPABILITIES
}

enum Outcome {
    Won(Acquired<RedlockHandle>),
    Lost { tally: Tally, too_slow: bool },
}

/// A waiter's subscriptions on every node; any release wakes it.
struct Waiting {
    signal: Arc<Signal>,
    registrations: Vec<Registration>,
}

impl RedlockBackend {
    /// Tokens that rise under timing and persistence assumptions, push wake-up,
    /// no FIFO, ttls in whole milliseconds from 50 ms.
    pub const CAPABILITIES: Capabilities = Capabilities {
        fencing: FencingGuarantee::UnderTimingAssumptions,
        fifo: false,
        wake: Wake::Push,
        session_bound: false,
        token_durability: TokenDurability::ServerClock,
        min_ttl: Duration::from_millis(50),
        ttl_granularity: Duration::from_millis(1),
    };

    /// Acquire options with the configured default ttl.
    pub fn default_options(&self) -> AcquireOptions {
        AcquireOptions::new().ttl(self.default_ttl)
    }

    /// Every node, without credentials.
    pub fn endpoints(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| &*n.endpoint).collect()
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The key prefix.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(super) fn quorum_unavailable(&self, answered: usize, detail: String) -> LockError {
        LockError::QuorumUnavailable {
            answered,
            nodes: self.nodes.len(),
            needed: self.quorum,
            detail,
        }
    }

    fn all_nodes(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// One try on every node at once.
    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        keys: &LockKeys,
    ) -> Result<Outcome, LockError> {
        let owner = new_owner();
        let mut undo = ReleaseOnDrop::new(self.nodes.clone(), keys, &owner, self.node_timeout);
        let race_deadline = req.wait != WaitUntil::NoWait
            && req.wait.instant().is_none_or(|at| at > Instant::now());
        let sent_at = Instant::now();
        let tally = tokio::select! {
            tally = self.acquire_round(keys, &owner, req.ttl, sent_at) => tally,
            _ = req.wait.reached(), if race_deadline => return Err(req.not_acquired()),
        };
        let validity = (sent_at + req.ttl).checked_sub(clock_drift(req.ttl));
        let too_slow = validity.is_none_or(|until| Instant::now() >= until);
        if let Some(token) = tally.max_token()
            && tally.won.len() >= self.quorum
            && !too_slow
            && self.raise_fences(keys, &tally.won, token).await >= self.quorum
        {
            undo.disarm();
            return Ok(Outcome::Won(Acquired {
                handle: RedlockHandle {
                    keys: keys.clone(),
                    owner,
                },
                token: FencingToken::new(token),
                sent_at,
            }));
        }
        // Give back whatever this attempt may hold: every node except those that
        // answered "held elsewhere", including the ones that failed or timed out
        // (a reply can be lost after the SET succeeded).
        let held: HashSet<usize> = tally.held.iter().map(|(node, _)| *node).collect();
        let targets = self
            .all_nodes()
            .into_iter()
            .filter(|i| !held.contains(i))
            .collect();
        let budget = self.node_timeout;
        let (k, o) = (keys.clone(), owner.clone());
        round::all(
            &self.nodes,
            targets,
            (Instant::now() + budget).into(),
            move |node| {
                let (keys, owner) = (k.clone(), o.clone());
                async move { node.release(&keys, &owner, budget).await }
            },
        )
        .await;
        undo.disarm();
        Ok(Outcome::Lost { tally, too_slow })
    }

    /// Sends the acquire script to every node at once and counts the replies,
    /// stopping early once a majority can no longer be won. Replies that arrive
    /// after that give their lock back by themselves.
    async fn acquire_round(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        sent_at: Instant,
    ) -> Tally {
        let (n, quorum, budget) = (self.nodes.len(), self.quorum, self.node_timeout);
        let (k, o) = (keys.clone(), owner.to_owned());
        let unheard: Unheard<Attempt> = Arc::new(
            move |node: Arc<Node>, result: &Result<Attempt, NodeError>| {
                let may_hold = matches!(result, Ok(Attempt::Won(_)))
                    || result.as_ref().is_err_and(NodeError::outcome_unknown);
                let (keys, owner) = (k.clone(), o.clone());
                may_hold.then(|| {
                    Box::pin(async move {
                        let _ = node.release(&keys, &owner, budget).await;
                    })
                        as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
                })
            },
        );
        let (k, o) = (keys.clone(), owner.to_owned());
        let op = move |node: Arc<Node>| {
            let (keys, owner) = (k.clone(), o.clone());
            async move { node.acquire(&keys, &owner, ttl, budget).await }
        };
        let mut replies = round::start(&self.nodes, 0..n, op, Some(unheard));
        let deadline = (sent_at + budget).into();
        let collected = round::collect(&mut replies, n, deadline, |so_far| {
            let lost = so_far
                .iter()
                .filter(|r| !matches!(r.result, Ok(Attempt::Won(_))))
                .count();
            lost > n - quorum
        })
        .await;
        drop(replies);
        let timed_out = (tokio::time::Instant::now() >= deadline).then_some(budget);
        Tally::of(collected, &self.nodes, BACKEND, timed_out)
    }

    /// Raises the fence counters of the nodes won to `token`. Returns how many
    /// nodes are known to have a counter ≥ `token`.
    async fn raise_fences(&self, keys: &LockKeys, won: &[(usize, u64)], token: u64) -> usize {
        let budget = self.node_timeout;
        let targets = won.iter().map(|(node, _)| *node).collect();
        let k = keys.clone();
        let replies = round::all(
            &self.nodes,
            targets,
            (Instant::now() + budget).into(),
            move |node| {
                let keys = k.clone();
                async move { node.raise_fence(&keys, token, budget).await }
            },
        )
        .await;
        let mut at_least: HashSet<usize> = replies
            .iter()
            .filter(|r| r.result.is_ok())
            .map(|r| r.node)
            .collect();
        at_least.extend(
            won.iter()
                .filter(|(_, t)| *t == token)
                .map(|(node, _)| *node),
        );
        at_least.len()
    }

    /// Subscribes the waiter on every node, waiting a little for the
    /// subscriptions (nodes that are down are polled instead).
    async fn subscribe(&self, keys: &LockKeys, until: Instant) -> Waiting {
        let signal = Arc::new(Signal::default());
        let mut registrations: Vec<Registration> = self
            .nodes
            .iter()
            .map(|node| node.subscriber.register(&keys.channel, signal.clone()))
            .collect();
        for registration in &mut registrations {
            registration.settled(until.into()).await;
        }
        Waiting {
            signal,
            registrations,
        }
    }

    /// Runs a compare-owner script on every node and judges ownership by majority.
    async fn on_majority(
        &self,
        handle: &RedlockHandle,
        renew_ttl: Option<Duration>,
    ) -> Result<(Ownership, Instant), LockError> {
        let budget = self.node_timeout;
        let sent_at = Instant::now();
        let (k, o) = (handle.keys.clone(), handle.owner.clone());
        let replies = round::all(
            &self.nodes,
            self.all_nodes(),
            (sent_at + budget).into(),
            move |node| {
                let (keys, owner) = (k.clone(), o.clone());
                async move {
                    match renew_ttl {
                        Some(ttl) => node.renew(&keys, &owner, ttl, budget).await,
                        None => node.release(&keys, &owner, budget).await,
                    }
                }
            },
        )
        .await;
        let held = replies
            .iter()
            .filter(|r| matches!(r.result, Ok(true)))
            .count();
        let not_held = replies
            .iter()
            .filter(|r| matches!(r.result, Ok(false)))
            .count();
        let unknown = self.nodes.len() - held - not_held;
        if held >= self.quorum {
            return Ok((Ownership::Held, sent_at));
        }
        if held + unknown < self.quorum {
            return Ok((Ownership::NotHeld, sent_at));
        }
        let mut failed = Vec::new();
        for reply in replies {
            if let Err(e) = reply.result {
                failed.push(describe(&self.nodes, reply.node, BACKEND, e));
            }
        }
        Err(self.quorum_unavailable(held + not_held, failed.join("; ")))
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    type Handle = RedlockHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RedlockHandle>, LockError> {
        let keys = LockKeys::new(&self.namespace, req.key);
        let mut waiting: Option<Waiting> = None;
        // Why the last attempt failed, when it was for want of a majority: said
        // instead of a bare timeout if the wait ends.
        let mut last_unavailable: Option<LockError>;
        let mut slow_since: Option<Instant> = None;
        loop {
            let seen = waiting
                .as_ref()
                .map(|w| (w.signal.clone(), w.signal.seen()));
            let outcome = self.attempt(&req, &keys).await?;
            if let Some((signal, seen)) = seen {
                signal.handled(seen);
            }
            let (tally, too_slow) = match outcome {
                Outcome::Won(acquired) => return Ok(acquired),
                Outcome::Lost { tally, too_slow } => (tally, too_slow),
            };
            let (n, reachable) = (self.nodes.len(), tally.reachable(self.nodes.len()));
            last_unavailable = None;
            if reachable < self.quorum {
                let unavailable = self.quorum_unavailable(reachable, tally.failures());
                // Nodes that are down or refuse us will not come back within a
                // wait: fail fast. Nodes that were only slow may answer the next
                // round (a loaded machine); keep trying until the wait ends.
                let since = *slow_since.get_or_insert_with(Instant::now);
                if tally.not_refusing(n) < self.quorum
                    || req.wait == WaitUntil::NoWait
                    || since.elapsed() >= self.slow_grace
                {
                    return Err(unavailable);
                }
                last_unavailable = Some(unavailable);
            } else {
                slow_since = None;
            }
            if req.wait == WaitUntil::NoWait {
                return Err(match too_slow {
                    true => LockError::Timeout {
                        key: req.key.clone(),
                        waited: req.started.elapsed(),
                    },
                    false => req.not_acquired(),
                });
            }
            let Some(w) = waiting.as_ref() else {
                // Subscribed before the next attempt: a release from here on wakes us.
                let until = Instant::now() + self.node_timeout * 2;
                tokio::select! {
                    w = self.subscribe(&keys, until) => waiting = Some(w),
                    _ = req.wait.reached() => return Err(last_unavailable.unwrap_or_else(|| req.not_acquired())),
                }
                continue;
            };
            let ready = w.registrations.iter().filter(|r| r.is_ready()).count();
            // A release is heard if a subscribed node is among the holder's majority.
            let heard = ready > self.nodes.len() - self.quorum;
            let jitter = self.retry_delay.mul_f64(rand::random_range(0.0..1.0));
            tokio::select! {
                _ = w.signal.woken() => {}
                _ = tokio::time::sleep(nap(tally.shortest_pttl(), heard)) => {}
                _ = req.wait.reached() => return Err(last_unavailable.unwrap_or_else(|| req.not_acquired())),
            }
            // Contenders woken by one release must not split the vote again.
            tokio::select! {
                _ = tokio::time::sleep(jitter) => {}
                _ = req.wait.reached() => return Err(last_unavailable.unwrap_or_else(|| req.not_acquired())),
            }
        }
    }

    async fn renew(&self, handle: &RedlockHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let (ownership, sent_at) = self.on_majority(handle, Some(ttl)).await?;
        if ownership == Ownership::Held && sent_at.elapsed() >= ttl.saturating_sub(clock_drift(ttl))
        {
            return Err(LockError::backend(
                BACKEND,
                format!(
                    "the renewal round took {:?}, longer than the ttl {ttl:?} allows; raise the ttl or lower node_timeout",
                    sent_at.elapsed()
                ),
            ));
        }
        Ok(ownership)
    }

    async fn release(&self, handle: &RedlockHandle) -> Result<Ownership, LockError> {
        Ok(self.on_majority(handle, None).await?.0)
    }
}
