//! `RedisLock`: the lock on one Redis server.
//!
//! Invariant: the lock key holds the owner value of exactly one acquisition, and
//! every change to it compares that value first, so a client only ever renews or
//! deletes its own lock; the fence counter beside it only rises.
//!
//! Acquire = one `EVALSHA` of the acquire script (`SET NX PX` + `INCR` of the
//! fence counter). When the lock is held, the waiter subscribes to the lock's
//! channel on the client's shared subscriber, and only then retries, so a release
//! after the retry always wakes it; it sleeps until a release message, or until
//! the holder's remaining ttl (from the script's reply) runs out, whichever comes
//! first. Renew and release are compare-owner scripts; release publishes.
//!
//! A held lease is watched for a server that lost it (a restart, a failover):
//! the restart check reads the lock key as soon as the client reconnects to a
//! different server process, and fires `lost()` rather than wait for the
//! renewal. With a restart guard, the acquire script itself refuses locks on a
//! server that may have lost some, until the guard has passed.

use crate::address::ServerAddress;
use crate::connection::RunId;
use crate::error::{BACKEND, CommandError};
use crate::keys::LockKeys;
use crate::protocol::{Attempt, ServerClient, loss_signal, release_on_drop};
use crate::replicas::ReplicaAck;
use crate::restart::{Place, RestartGuard};
use crate::subscriber::Waiting;
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendLock, LossSignal, Ownership, WaitUntil,
};
use distlock_core::toolkit::Timeouts;
use distlock_core::toolkit::{Inspect, random_owner};
use distlock_core::{
    Capabilities, FencingGuarantee, FencingToken, LockError, Primitives, Support, TokenDurability,
    Wake,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Redis lock client: [`crate::RedisConfig::connect`] gives one.
pub type RedisLock = BackendLock<RedisBackend>;

/// The single-node Redis adapter; reach it through [`BackendLock::backend`].
pub struct RedisBackend {
    pub(crate) server: Arc<ServerClient>,
    namespace: String,
    pub(crate) timeout: Duration,
    pub(crate) replicas: Option<ReplicaAck>,
    pub(crate) guard: Option<RestartGuard>,
    /// Waiters are served in arrival order (`fair=true`, see `fair.rs`).
    pub(crate) fair: bool,
    /// Found through Sentinels or a Cluster's seeds: a deployment that fails over.
    fails_over: bool,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("endpoint", &self.server.endpoint)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What a Redis client keeps per held lock: the keys, the random owner value
/// stored in the lock key, and the server process that granted it.
#[derive(Debug)]
pub struct RedisHandle {
    pub(crate) keys: LockKeys,
    pub(crate) owner: String,
    pub(crate) run_id: RunId,
}

enum Step {
    Won(Won),
    Held(i64),
}

/// A won attempt, without its keys: the caller moves them into the handle
/// rather than copy them, as every uncontended acquire would.
struct Won {
    owner: String,
    run_id: RunId,
    token: u64,
    sent_at: Instant,
}

impl Won {
    fn holding(self, keys: LockKeys) -> Acquired<RedisHandle> {
        Acquired {
            handle: RedisHandle {
                keys,
                owner: self.owner,
                run_id: self.run_id,
            },
            token: FencingToken::new(self.token),
            sent_at: self.sent_at,
        }
    }
}

impl RedisBackend {
    /// Strict tokens on one server (re-seeded above the namespace's
    /// high-water after the name's state was collected, and from the server
    /// clock after a restart that lost them), push wake-up, no FIFO, ttls in
    /// whole milliseconds from 10 ms, idle names' state collected, a minimum hold
    /// kept by the key's expiry.
    pub const CAPABILITIES: Capabilities = Capabilities::new()
        .fencing(FencingGuarantee::Strict)
        .wake(Wake::Push)
        .token_durability(TokenDurability::ServerClock)
        .min_ttl(Duration::from_millis(10))
        .primitives(Primitives::ALL)
        .state_collection(Support::Offered)
        .min_hold(Support::Offered);

    /// [`RedisBackend::CAPABILITIES`] with waiters served in arrival order:
    /// the fair lock (`fair=true`).
    pub const FAIR_CAPABILITIES: Capabilities = Self::CAPABILITIES.fifo(true);

    /// `capabilities` on a deployment that fails over (`redis+sentinel://`,
    /// `redis+cluster://`): replication is asynchronous, so a promoted replica
    /// may lack the newest counter and hand out a token at or below one already
    /// given. Tokens are strict only while no failover loses a write (measured
    /// by `redis_sentinel::chaos`).
    pub const fn failing_over(capabilities: Capabilities) -> Capabilities {
        capabilities.fencing(FencingGuarantee::UnderTimingAssumptions)
    }

    /// Makes the client and loads the scripts, so that a wrong address, password
    /// or a server without Lua scripting fails here rather than at the first
    /// acquire.
    pub(crate) async fn connect(
        address: &ServerAddress,
        namespace: String,
        timeouts: Timeouts,
        replicas: Option<ReplicaAck>,
        restart_guard: Option<Duration>,
        fair: bool,
        state_ttl: Duration,
    ) -> Result<Self, LockError> {
        let server = Arc::new(ServerClient::new(address, BACKEND, timeouts, state_ttl)?);
        server
            .load_scripts(timeouts.reply)
            .await
            .map_err(|e| e.into_lock_error(BACKEND, &server.endpoint))?;
        Ok(RedisBackend {
            server,
            guard: restart_guard.map(|guard| RestartGuard::new(&namespace, guard)),
            namespace,
            timeout: timeouts.reply,
            replicas,
            fair,
            fails_over: address.sentinels.is_some() || address.cluster.is_some(),
        })
    }

    /// The server, without credentials.
    pub fn endpoint(&self) -> &str {
        &self.server.endpoint
    }

    /// The key prefix.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn error(&self, e: CommandError) -> LockError {
        e.into_lock_error(BACKEND, &self.server.endpoint)
    }

    /// One try: won (with replicas acknowledged, if configured) or held elsewhere.
    async fn attempt(&self, req: &AcquireRequest<'_>, keys: &LockKeys) -> Result<Step, LockError> {
        let owner = req.meta.tag_owner(&random_owner());
        let undo = release_on_drop(
            std::slice::from_ref(&self.server),
            keys,
            &owner,
            self.timeout,
        );
        // A wait that already ended still gets its one attempt.
        let race_deadline =
            req.wait != WaitUntil::No && req.wait.instant().is_none_or(|at| at > Instant::now());
        let sent_at = Instant::now();
        let reply = tokio::select! {
            reply = self.server.acquire_acked(keys, &owner, (req.ttl, self.guard.as_ref()), self.timeout, self.replicas) => reply,
            _ = req.wait.reached(), if race_deadline => return Err(req.not_acquired()),
        };
        let (token, run_id, acked) = match reply {
            Ok((Attempt::Won(token, run_id), acked)) => (token, run_id, acked),
            Ok((Attempt::Held(pttl), _)) => {
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
        if let (Some(ack), Some(acked)) = (self.replicas, acked) {
            // On failure `undo` gives the lock back: never a lease the replicas
            // may not have.
            let acked = acked.map_err(|e| self.error(e))?;
            self.too_few_replicas(ack, acked, "acquire was undone")?;
        }
        undo.disarm();
        Ok(Step::Won(Won {
            owner,
            run_id,
            token,
            sent_at,
        }))
    }

    /// Waits for the lock held elsewhere: subscribed to its release channel
    /// before the next attempt, so a release from then on wakes this waiter.
    async fn wait_for_release(
        &self,
        req: &AcquireRequest<'_>,
        keys: LockKeys,
    ) -> Result<Acquired<RedisHandle>, LockError> {
        let until = tokio::time::Instant::now() + self.timeout;
        let mut waiting = tokio::select! {
            waiting = Waiting::start([&self.server.subscriber], &keys.channel, until) => waiting,
            _ = req.wait.reached() => return Err(req.not_acquired()),
        };
        loop {
            let seen = waiting.seen();
            let step = self.attempt(req, &keys).await?;
            waiting.handled(seen);
            let pttl = match step {
                Step::Won(won) => {
                    drop(waiting);
                    return Ok(won.holding(keys));
                }
                Step::Held(pttl) => pttl,
            };
            let heard = waiting.ready() > 0;
            if !waiting.nap(pttl, heard, req.wait).await {
                return Err(req.not_acquired());
            }
        }
    }

    async fn await_replicas(&self, ack: ReplicaAck, consequence: &str) -> Result<(), LockError> {
        let acked = self
            .server
            .wait_replicas(ack.replicas, ack.timeout, self.timeout)
            .await
            .map_err(|e| self.error(e))?;
        self.too_few_replicas(ack, acked, consequence)
    }

    /// The error when fewer than `ack.replicas` replicas acknowledged.
    fn too_few_replicas(
        &self,
        ack: ReplicaAck,
        acked: u32,
        consequence: &str,
    ) -> Result<(), LockError> {
        if acked < ack.replicas {
            return Err(LockError::backend(
                BACKEND,
                format!(
                    "only {acked} of {} replicas of {} acknowledged within {:?}; the {consequence}. \
                     Check replication (INFO replication) or lower wait_replicas",
                    ack.replicas, self.server.endpoint, ack.timeout
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
        let capabilities = match self.fair {
            true => Self::FAIR_CAPABILITIES,
            false => Self::CAPABILITIES,
        };
        match self.fails_over {
            true => Self::failing_over(capabilities),
            false => capabilities,
        }
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RedisHandle>, LockError> {
        // The fair lock and the wait are boxed apart: inline, their state would
        // ride in every uncontended acquire's future, which is copied whole
        // into its box (a copy the profile showed as 9k instructions a cycle).
        if self.fair {
            return Box::pin(self.acquire_fair(req)).await;
        }
        RestartGuard::check(self.guard.as_ref(), req.ttl)?;
        let keys = LockKeys::new(&self.namespace, req.key);
        // The uncontended path: one round trip, no subscription.
        if let Step::Won(won) = self.attempt(&req, &keys).await? {
            return Ok(won.holding(keys));
        }
        if req.wait == WaitUntil::No {
            return Err(req.not_acquired());
        }
        Box::pin(self.wait_for_release(&req, keys)).await
    }

    async fn renew(&self, handle: &RedisHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let renewed = self
            .server
            .renew(&handle.keys, &handle.owner, ttl, self.timeout)
            .await
            .map_err(|e| self.error(e))?;
        Ok(if renewed {
            Ownership::Held
        } else {
            Ownership::NotHeld
        })
    }

    async fn release(&self, handle: &RedisHandle) -> Result<Ownership, LockError> {
        let released = if self.fair {
            self.server
                .fair_leave(&handle.keys, &handle.owner, self.timeout)
                .await
        } else {
            self.server
                .release(&handle.keys, &handle.owner, self.timeout)
                .await
        };
        let released = released.map_err(|e| self.error(e))?;
        if !released {
            return Ok(Ownership::NotHeld);
        }
        if let Some(ack) = self.replicas {
            self.await_replicas(ack, "release may be lost if the primary fails now")
                .await?;
        }
        Ok(Ownership::Held)
    }

    fn loss_signal(&self, handle: &RedisHandle) -> Option<LossSignal> {
        let granted = vec![(self.server.clone(), handle.run_id.clone())];
        let place = Place::Key(handle.keys.lock.as_str().into());
        Some(loss_signal(granted, place, handle.owner.clone(), 1))
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
