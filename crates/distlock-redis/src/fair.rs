//! The fair (FIFO) lock on one Redis server (`?fair=true`), in the manner of
//! Redisson's `RFairLock`: the same lock key, token counter and renewal as the
//! plain lock, plus a queue of waiters that the acquire script serves in
//! arrival order.
//!
//! Invariants:
//! - The lock is granted only to the head of the queue, or to anyone when the
//!   queue is empty; the head is removed from the queue as it takes the lock.
//! - A waiter keeps one owner value for its whole wait and renews its place at
//!   every attempt; it attempts at least three times per place lifetime (its
//!   ttl, within 300 ms and 5 s), so a live waiter never loses its place, and
//!   one that vanished (a crash) is dropped by the next script once its place
//!   expires.
//! - A waiter whose wait ends or is dropped leaves the queue at once (the
//!   leave script, armed in a `CancelGuard`; an attempt cut off in flight is
//!   followed by the leave script on its own connection).
//! - Whoever frees the lock (release, leave, or an attempt that finds it free
//!   but not its turn) publishes on the head's own channel
//!   (`<lock channel>:<owner>`); waiters also listen on the lock channel, which
//!   an operator's delete publishes on.

use crate::backend::{RedisBackend, RedisHandle};
use crate::keys::LockKeys;
use crate::protocol::fair::turn_channel;
use crate::protocol::{Attempt as Granted, ServerClient};
use crate::shares::{Attempt, place_lifetime, queued_wait, take_turns};
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{CancelGuard, UndoFuture, random_owner};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    ) -> Result<Attempt<Acquired<RedisHandle>>, LockError> {
        let queued = req.wait != WaitUntil::No;
        let place = place_lifetime(req);
        let sent_at = Instant::now();
        let reply = self
            .server
            .fair_acquire(keys, owner, req.ttl, place, self.timeout)
            .await;
        Ok(match reply.map_err(|e| self.error(e))? {
            Granted::Won(token, run_id) => Attempt::Won(Acquired {
                handle: RedisHandle {
                    keys: keys.clone(),
                    owner: owner.to_owned(),
                    run_id,
                },
                token: FencingToken::new(token),
                sent_at,
            }),
            Granted::Held(wait) if queued => Attempt::Wait(queued_wait(wait, place)),
            Granted::Held(wait) => Attempt::Wait(wait),
        })
    }

    /// Acquires in queue order, waiting per `req.wait`.
    pub(crate) async fn acquire_fair(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<RedisHandle>, LockError> {
        let keys = LockKeys::new(self.namespace(), req.key);
        let owner = req.meta.tag_owner(&random_owner());
        let leave = leave_on_drop(&self.server, &keys, &owner, self.timeout);
        let turn = turn_channel(&keys, &owner);
        let channels = (keys.channel.as_str(), Some(turn.as_str()));
        let attempt = |_| self.fair_attempt(&req, &keys, &owner);
        let outcome = take_turns(&self.server, channels, &req, self.timeout, attempt).await;
        // Won, or a try refused without taking a place: nothing to leave.
        if matches!(outcome, Ok(_) | Err(LockError::Busy { .. })) {
            leave.disarm();
        }
        outcome
    }
}
