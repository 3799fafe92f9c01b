//! `RedisLock`: the single-node wire protocol.
//!
//! Acquire = one `EVALSHA` of the acquire script (`SET NX PX` + `INCR` of the
//! fence counter). When the lock is held, the waiter subscribes to the lock's
//! channel on the client's shared subscriber, and only then retries, so a release
//! after the retry always wakes it; it sleeps until a release message, or until
//! the holder's remaining ttl (from the script's reply) runs out, whichever comes
//! first. Renew and release are compare-owner scripts; release publishes.

use crate::config::{BACKEND, RedisConfig, ReplicaAck};
use crate::error::NodeError;
use crate::keys::LockKeys;
use crate::node::{Attempt, Node, NodeTimeouts, ReleaseOnDrop};
use crate::subscriber::Signal;
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::{
    AcquireOptions, BackendLock, Capabilities, FencingGuarantee, FencingToken, LockError,
    TokenDurability, Wake,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Redis lock client: [`RedisConfig::connect`] gives one.
pub type RedisLock = BackendLock<RedisBackend>;

/// The longest a waiter sleeps without a message before it looks again, in case
/// a release message was lost on a connection that failed silently.
const MAX_NAP: Duration = Duration::from_secs(5);
/// How often a waiter looks while the subscriber connection is down.
const POLL_WHEN_DOWN: Duration = Duration::from_millis(200);

/// The single-node Redis adapter; reach it through [`BackendLock::backend`].
pub struct RedisBackend {
    node: Arc<Node>,
    namespace: String,
    default_ttl: Duration,
    response_timeout: Duration,
    replicas: Option<ReplicaAck>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("endpoint", &self.node.endpoint)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What a Redis client keeps per held lock: the keys and the random owner value
/// stored in the lock key.
#[derive(Debug)]
pub struct RedisHandle {
    keys: LockKeys,
    owner: String,
}

/// What the single-node adapter guarantees.
pub(crate) fn capabilities() -> Capabilities {
    RedisBackend::CAPABILITIES
}

/// A fresh random owner value: 128 bits, so no other acquisition ever has it.
pub(crate) fn new_owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// How long to sleep before looking again, given the holder's remaining ttl.
pub(crate) fn nap(pttl: i64, subscribed: bool) -> Duration {
    let until_expiry = match u64::try_from(pttl) {
        Ok(ms) => Duration::from_millis(ms.saturating_add(1)),
        // -1: the key has no expiry (set by hand); -2: gone already.
        Err(_) if pttl == -1 => MAX_NAP,
        Err(_) => Duration::ZERO,
    };
    until_expiry.min(if subscribed { MAX_NAP } else { POLL_WHEN_DOWN })
}

enum Step {
    Won(Acquired<RedisHandle>),
    Held(i64),
}

impl RedisBackend {
    /// Strict tokens on one server (re-seeded from the server clock after a
    /// restart that lost them), push wake-up, no FIFO, ttls in whole milliseconds
    /// from 10 ms.
    pub const CAPABILITIES: Capabilities = Capabilities {
        fencing: FencingGuarantee::Strict,
        fifo: false,
        wake: Wake::Push,
        session_bound: false,
        token_durability: TokenDurability::ServerClock,
        min_ttl: Duration::from_millis(10),
        ttl_granularity: Duration::from_millis(1),
    };

    pub(crate) async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        let timeouts = NodeTimeouts {
            connect: config.connect_timeout,
            response: config.response_timeout,
        };
        let node = Arc::new(Node::new(&config.server, BACKEND, timeouts)?);
        node.check(config.response_timeout)
            .await
            .map_err(|e| e.into_lock_error(BACKEND, &node.endpoint))?;
        Ok(RedisBackend {
            node,
            namespace: config.namespace,
            default_ttl: config.default_ttl,
            response_timeout: config.response_timeout,
            replicas: config.replicas,
        })
    }

    /// Acquire options with the configured default ttl.
    pub fn default_options(&self) -> AcquireOptions {
        AcquireOptions::new().ttl(self.default_ttl)
    }

    /// The server, without credentials.
    pub fn endpoint(&self) -> &str {
        &self.node.endpoint
    }

    /// The key prefix.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn error(&self, e: NodeError) -> LockError {
        e.into_lock_error(BACKEND, &self.node.endpoint)
    }

    /// One try: won (with replicas acknowledged, if configured) or held elsewhere.
    async fn attempt(&self, req: &AcquireRequest<'_>, keys: &LockKeys) -> Result<Step, LockError> {
        let owner = new_owner();
        let mut undo =
            ReleaseOnDrop::new(vec![self.node.clone()], keys, &owner, self.response_timeout);
        // A wait that already ended still gets its one attempt.
        let race_deadline = req.wait != WaitUntil::NoWait
            && req.wait.instant().is_none_or(|at| at > Instant::now());
        let sent_at = Instant::now();
        let reply = tokio::select! {
            reply = self.node.acquire(keys, &owner, req.ttl, self.response_timeout) => reply,
            _ = req.wait.reached(), if race_deadline => return Err(req.not_acquired()),
        };
        let token = match reply {
            Ok(Attempt::Won(token)) => token,
            Ok(Attempt::Held(pttl)) => {
                undo.disarm();
                return Ok(Step::Held(pttl));
            }
            Err(e) => {
                if !e.outcome_unknown() {
                    undo.disarm();
                }
                return Err(self.error(e));
            }
        };
        if let Some(ack) = self.replicas {
            // On failure `undo` gives the lock back.
            self.await_replicas(ack, "acquire was undone").await?;
        }
        undo.disarm();
        Ok(Step::Won(Acquired {
            handle: RedisHandle {
                keys: keys.clone(),
                owner,
            },
            token: FencingToken::new(token),
            sent_at,
        }))
    }

    async fn await_replicas(&self, ack: ReplicaAck, consequence: &str) -> Result<(), LockError> {
        let acked = self
            .node
            .wait_replicas(ack.replicas, ack.timeout, self.response_timeout)
            .await
            .map_err(|e| self.error(e))?;
        if acked < ack.replicas {
            return Err(LockError::backend(
                BACKEND,
                format!(
                    "only {acked} of {} replicas of {} acknowledged within {:?}; the {consequence}. \
                     Check replication (INFO replication) or lower wait_replicas",
                    ack.replicas, self.node.endpoint, ack.timeout
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Backend for RedisBackend {
    type Handle = RedisHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RedisHandle>, LockError> {
        let keys = LockKeys::new(&self.namespace, req.key);
        // The uncontended path: one round trip, no subscription.
        if let Step::Won(acquired) = self.attempt(&req, &keys).await? {
            return Ok(acquired);
        }
        if req.wait == WaitUntil::NoWait {
            return Err(req.not_acquired());
        }
        let signal = Arc::new(Signal::default());
        let mut registration = self.node.subscriber.register(&keys.channel, signal.clone());
        // Subscribed before the next attempt: a release from here on wakes us.
        tokio::select! {
            _ = registration.settled((Instant::now() + self.response_timeout).into()) => {}
            _ = req.wait.reached() => return Err(req.not_acquired()),
        }
        loop {
            let seen = signal.seen();
            let pttl = match self.attempt(&req, &keys).await? {
                Step::Won(acquired) => {
                    signal.handled(seen);
                    return Ok(acquired);
                }
                Step::Held(pttl) => {
                    signal.handled(seen);
                    pttl
                }
            };
            let nap = nap(pttl, registration.is_ready());
            tokio::select! {
                _ = signal.woken() => {}
                _ = tokio::time::sleep(nap) => {}
                _ = req.wait.reached() => return Err(req.not_acquired()),
            }
        }
    }

    async fn renew(&self, handle: &RedisHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let renewed = self
            .node
            .renew(&handle.keys, &handle.owner, ttl, self.response_timeout)
            .await
            .map_err(|e| self.error(e))?;
        Ok(if renewed {
            Ownership::Held
        } else {
            Ownership::NotHeld
        })
    }

    async fn release(&self, handle: &RedisHandle) -> Result<Ownership, LockError> {
        let released = self
            .node
            .release(&handle.keys, &handle.owner, self.response_timeout)
            .await
            .map_err(|e| self.error(e))?;
        if !released {
            return Ok(Ownership::NotHeld);
        }
        if let Some(ack) = self.replicas {
            self.await_replicas(ack, "release may be lost if the primary fails now")
                .await?;
        }
        Ok(Ownership::Held)
    }
}
