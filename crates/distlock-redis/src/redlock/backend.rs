//! `Redlock`: acquire on a majority of N independent nodes, in one concurrent
//! round, then, only if fewer than a majority of the nodes won answered the
//! token handed out, raise the others' fence counters to it (`votes.rs`).
//!
//! Invariant (fencing): before a lease with token T is returned, a majority of
//! nodes have a fence counter ≥ T. Any later winner holds a majority too, which
//! meets one of those nodes, whose `INCR` then gives more than T; so later tokens
//! are greater, as long as nodes keep their counters (see the docs).
//!
//! Restarts: a lease is watched on every node that granted it, and `lost()`
//! fires as soon as fewer than a majority of them still hold it. With a restart
//! guard, each node refuses locks after it lost its state, which is the
//! delayed-restart rule enforced by the node itself.

use super::BACKEND;
use super::round;
use super::tally::Tally;
use crate::address::ServerAddress;
use crate::connection::RunId;
use crate::keys::LockKeys;
use crate::protocol::{ServerClient, loss_signal, release_on_drop};
use crate::restart::{Place, RestartGuard};
use crate::subscriber::Waiting;
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendLock, LossSignal, Ownership, WaitUntil, clock_drift,
};
use distlock_core::toolkit::Timeouts;
use distlock_core::toolkit::{Backoff, Inspect, random_owner};
use distlock_core::{
    Capabilities, FencingGuarantee, FencingToken, LockError, Primitives, Support, TokenDurability,
    Wake,
};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod votes;

/// A Redlock client: [`crate::RedlockConfig::connect`] gives one.
pub type Redlock = BackendLock<RedlockBackend>;

/// The Redlock adapter; reach it through [`BackendLock::backend`].
pub struct RedlockBackend {
    pub(super) nodes: Vec<Arc<ServerClient>>,
    pub(super) quorum: usize,
    pub(super) namespace: String,
    pub(super) timeout: Duration,
    retry_delay: Duration,
    /// How long nodes may stay too slow for a majority before a waiting acquire
    /// gives up on them (the connect timeout).
    slow_grace: Duration,
    pub(super) guard: Option<RestartGuard>,
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
    /// Shared, not copied, by the requests to every node.
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    /// The nodes that granted it, with their server processes.
    won: Vec<(usize, RunId)>,
}

enum Outcome {
    Won(Acquired<RedlockHandle>),
    Lost { tally: Tally, too_slow: bool },
}

impl RedlockBackend {
    /// Tokens that rise under timing and persistence assumptions, push wake-up,
    /// no FIFO, ttls in whole milliseconds from 50 ms.
    pub const CAPABILITIES: Capabilities = Capabilities::new()
        .fencing(FencingGuarantee::UnderTimingAssumptions)
        .wake(Wake::Push)
        .token_durability(TokenDurability::ServerClock)
        .min_ttl(Duration::from_millis(50))
        .primitives(
            Primitives::ALL
                .semaphore(Support::NotOffered(
                    "no quorum semaphore on Redlock yet; see docs/backends/redlock.md for the argument",
                ))
                .rwlock(Support::NotOffered(
                    "no quorum read-write lock on Redlock: per-node reader sets cannot be voted on safely",
                )),
        )
        .state_collection(Support::Offered)
        .min_hold(Support::Offered);

    /// Makes a client per node and loads the scripts on all of them at once; a
    /// majority must answer.
    pub(crate) async fn connect(
        addresses: &[ServerAddress],
        namespace: String,
        timeouts: Timeouts,
        retry_delay: Duration,
        (restart_guard, state_ttl): (Option<Duration>, Duration),
    ) -> Result<Self, LockError> {
        let mut nodes = Vec::with_capacity(addresses.len());
        for address in addresses {
            let node = ServerClient::new(address, BACKEND, timeouts, state_ttl)?;
            nodes.push(Arc::new(node));
        }
        let guard = restart_guard.map(|guard| RestartGuard::new(&namespace, guard));
        let backend = RedlockBackend {
            quorum: nodes.len() / 2 + 1,
            nodes,
            namespace,
            timeout: timeouts.reply,
            retry_delay,
            slow_grace: timeouts.connect,
            guard,
        };
        let (budget, patience) = (timeouts.reply, timeouts.connect + timeouts.reply);
        let answers = round::on_all(
            &backend.nodes,
            backend.all_nodes(),
            patience,
            move |node| async move { node.load_scripts(budget).await },
        )
        .await;
        for failure in &answers.failed {
            tracing::warn!(failure = %failure, "redlock node unavailable at connect; its vote counts as lost until it answers");
        }
        if answers.ok.len() < backend.quorum {
            return Err(backend.quorum_unavailable(answers.ok.len(), answers.failed.join("; ")));
        }
        Ok(backend)
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

    pub(super) fn all_nodes(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// One try on every node at once.
    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        keys: &Arc<LockKeys>,
    ) -> Result<Outcome, LockError> {
        let owner: Arc<str> = req.meta.tag_owner(&random_owner()).into();
        let undo = release_on_drop(&self.nodes, keys, &owner, self.timeout);
        let race_deadline =
            req.wait != WaitUntil::No && req.wait.instant().is_none_or(|at| at > Instant::now());
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
            && self.raise_fences(keys, &tally.won, (token, req.ttl)).await >= self.quorum
        {
            undo.disarm();
            return Ok(Outcome::Won(Acquired {
                handle: RedlockHandle {
                    keys: keys.clone(),
                    owner,
                    won: tally
                        .won
                        .iter()
                        .map(|(node, _, r)| (*node, r.clone()))
                        .collect(),
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
        let (budget, k, o) = (self.timeout, keys.clone(), owner.clone());
        round::on_all(&self.nodes, targets, budget, move |node| {
            let (keys, owner) = (k.clone(), o.clone());
            async move { node.release(&keys, &owner, budget).await }
        })
        .await;
        undo.disarm();
        Ok(Outcome::Lost { tally, too_slow })
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    type Handle = RedlockHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RedlockHandle>, LockError> {
        RestartGuard::check(self.guard.as_ref(), req.ttl)?;
        let keys = Arc::new(LockKeys::new(&self.namespace, req.key));
        let mut waiting: Option<Waiting> = None;
        // Contenders that split a vote must not split it again.
        let mut retry = Backoff::new(self.retry_delay, self.retry_delay);
        // Why the last attempt failed, when it was for want of a majority: said
        // instead of a bare timeout if the wait ends.
        let mut last_unavailable: Option<LockError>;
        let mut slow_since: Option<Instant> = None;
        loop {
            let seen = waiting.as_ref().map(Waiting::seen);
            let outcome = self.attempt(&req, &keys).await?;
            if let (Some(waiting), Some(seen)) = (&waiting, seen) {
                waiting.handled(seen);
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
                    || req.wait == WaitUntil::No
                    || since.elapsed() >= self.slow_grace
                {
                    return Err(unavailable);
                }
                last_unavailable = Some(unavailable);
            } else {
                slow_since = None;
            }
            if req.wait == WaitUntil::No {
                return Err(match too_slow {
                    true => LockError::Timeout {
                        key: req.key.clone(),
                        waited: req.started.elapsed(),
                    },
                    false => req.not_acquired(),
                });
            }
            let give_up = |why: Option<LockError>| why.unwrap_or_else(|| req.not_acquired());
            let Some(w) = waiting.as_mut() else {
                // Subscribed before the next attempt: a release from here on wakes us.
                let until = tokio::time::Instant::now() + self.timeout * 2;
                let subscribers = self.nodes.iter().map(|node| &node.subscriber);
                tokio::select! {
                    w = Waiting::start(subscribers, &keys.channel, until) => waiting = Some(w),
                    _ = req.wait.reached() => return Err(give_up(last_unavailable)),
                }
                continue;
            };
            // A release is heard if a subscribed node is among the holder's majority.
            let heard = w.ready() > n - self.quorum;
            // A holder with a majority was seen: its release (the push) is the
            // hand-off, so the next attempt goes out as soon as it is heard. When
            // nobody had a majority, contenders split the vote: a random delay
            // first, so that they do not split it again.
            let split = tally.held.len() < self.quorum;
            if !w.nap(tally.shortest_pttl(), heard, req.wait).await
                || (split && !retry.pause(Duration::MAX, req.wait).await)
            {
                return Err(give_up(last_unavailable));
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
                    "the renewal round took {:?}, longer than the ttl {ttl:?} allows; raise the ttl or lower the timeout",
                    sent_at.elapsed()
                ),
            ));
        }
        Ok(ownership)
    }

    async fn release(&self, handle: &RedlockHandle) -> Result<Ownership, LockError> {
        Ok(self.on_majority(handle, None).await?.0)
    }

    fn loss_signal(&self, handle: &RedlockHandle) -> Option<LossSignal> {
        let granted: Vec<_> = handle
            .won
            .iter()
            .filter_map(|(node, run_id)| Some((self.nodes.get(*node)?.clone(), run_id.clone())))
            .collect();
        let place = Place::Key(handle.keys.lock.as_str().into());
        Some(loss_signal(
            granted,
            place,
            handle.owner.to_string(),
            self.quorum,
        ))
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
