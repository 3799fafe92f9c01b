//! The fair (FIFO) lock on one Redis server (`?fair=true`), in the manner of
//! Redisson's `RFairLock`: the same lock key, token counter and renewal as the
//! plain lock, plus a queue of waiters that the acquire script serves in
//! arrival order.
//!
//! Invariants:
//! - The lock is granted only to the head of the queue, or to anyone when the
//!   queue is empty; the head is removed from the queue as it takes the lock.
//! - A waiter keeps one owner value for its whole wait and renews its place at
//!   every attempt; it attempts at least three times per place lifetime
//!   ([`place_lifetime`]), so a live waiter never loses its place, and one that
//!   vanished (a crash) is dropped by the next script once its place expires.
//! - A waiter whose wait ends or is dropped leaves the queue at once (the
//!   leave script, armed in a `CancelGuard`).
//! - Whoever frees the lock (release, leave, or an attempt that finds it free
//!   but not its turn) publishes on the head's own channel
//!   (`<lock channel>:<owner>`); waiters also listen on the lock channel, which
//!   an operator's delete publishes on.

use crate::backend::{RedisBackend, RedisHandle};
use crate::keys::LockKeys;
use crate::protocol::fair::turn_channel;
use crate::protocol::{Attempt, ServerClient};
use crate::subscriber::Waiting;
use distlock_core::backend::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{CancelGuard, UndoFuture, random_owner};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a waiter's place lives without a new attempt: its ttl (a vanished
/// waiter holds the queue no longer than a crashed holder holds the lock),
/// within 300 ms (so that short ttls do not make waiters spin) and 5 s (so
/// that a vanished waiter does not stall the queue for a long ttl).
pub(crate) fn place_lifetime(ttl: Duration) -> Duration {
    ttl.clamp(Duration::from_millis(300), Duration::from_secs(5))
}

/// Takes the waiter out of the queue and releases what it may hold, unless
/// disarmed.
fn leave_on_drop(
    server: &Arc<ServerClient>,
    keys: &LockKeys,
    owner: &str,
    budget: Duration,
) -> CancelGuard<(), impl FnOnce(()) -> Option<UndoFuture> + use<>> {
    let (server, keys, owner) = (server.clone(), keys.clone(), owner.to_owned());
    CancelGuard::new((), move |()| {
        Some(Box::pin(async move {
            if let Err(e) = server.fair_leave(&keys, &owner, budget).await {
                tracing::debug!(endpoint = %server.endpoint, error = %e, "leaving the fair queue failed; the place expires on its own");
            }
        }) as UndoFuture)
    })
}

impl RedisBackend {
    /// One fair attempt: won, or how long to sleep at most.
    async fn fair_attempt(
        &self,
        req: &AcquireRequest<'_>,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<Result<Acquired<RedisHandle>, i64>, LockError> {
        let queued = req.wait != WaitUntil::NoWait;
        let place = if queued {
            place_lifetime(req.ttl)
        } else {
            Duration::ZERO
        };
        let sent_at = Instant::now();
        let race = queued && req.wait.instant().is_none_or(|at| at > Instant::now());
        let reply = tokio::select! {
            reply = self.server.fair_acquire(keys, owner, req.ttl, place, self.timeout) => reply,
            _ = req.wait.reached(), if race => return Err(req.not_acquired()),
        };
        match reply.map_err(|e| self.error(e))? {
            Attempt::Won(token, run_id) => Ok(Ok(Acquired {
                handle: RedisHandle {
                    keys: keys.clone(),
                    owner: owner.to_owned(),
                    run_id,
                },
                token: FencingToken::new(token),
                sent_at,
            })),
            // Back before the place expires.
            Attempt::Held(wait) if queued => {
                let refresh = i64::try_from((place / 3).as_millis()).unwrap_or(i64::MAX);
                Ok(Err(if wait < 0 { refresh } else { wait.min(refresh) }))
            }
            Attempt::Held(wait) => Ok(Err(wait)),
        }
    }

    /// Acquires in queue order, waiting per `req.wait`.
    pub(crate) async fn acquire_fair(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<RedisHandle>, LockError> {
        let keys = LockKeys::new(self.namespace(), req.key);
        let owner = random_owner();
        let leave = leave_on_drop(&self.server, &keys, &owner, self.timeout);
        if let Ok(won) = self.fair_attempt(&req, &keys, &owner).await? {
            leave.disarm();
            return Ok(won);
        }
        if req.wait == WaitUntil::NoWait {
            leave.disarm();
            return Err(req.not_acquired());
        }
        let until = tokio::time::Instant::now() + self.timeout;
        let subscriber = [&self.server.subscriber];
        let turn = turn_channel(&keys, &owner);
        // Subscribed to both before the next attempt: a release or an
        // operator's delete from here on wakes us.
        let (mut mine, mut any) = tokio::select! {
            both = async {
                (Waiting::start(subscriber, &turn, until).await,
                 Waiting::start(subscriber, &keys.channel, until).await)
            } => both,
            _ = req.wait.reached() => return Err(req.not_acquired()),
        };
        loop {
            let seen = (mine.seen(), any.seen());
            let step = self.fair_attempt(&req, &keys, &owner).await?;
            mine.handled(seen.0);
            any.handled(seen.1);
            let wait = match step {
                Ok(won) => {
                    leave.disarm();
                    return Ok(won);
                }
                Err(wait) => wait,
            };
            let heard = mine.ready() > 0 && any.ready() > 0;
            let more = tokio::select! {
                more = mine.nap(wait, heard, req.wait) => more,
                more = any.nap(wait, heard, req.wait) => more,
            };
            if !more {
                return Err(req.not_acquired());
            }
        }
    }
}
