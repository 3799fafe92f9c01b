//! The Redis semaphore: `limit` expiring permits of one name, each in the
//! lowest free slot, taken by one Lua script per attempt.
//!
//! Keys (all with the lock's hash tag, see [`ShareKeys`]):
//! `<lock key>:sem:expiry` (owner → expiry ms), `…:sem:info` (owner →
//! `slot:token`), `…:sem:limit` (the limit in use), `…:sem:fence` (the token
//! counter, never expires) and the channel `…:sem:ch`.
//!
//! Invariant: after the acquire script's sweep, the expiry set holds exactly
//! the live permits, fewer than `limit` of them when one is granted, and their
//! slots are distinct (the new one is the lowest no live permit has). The
//! limit is stored with the permits: a client with another limit is refused
//! while any permit lives, and the limit goes with the last permit. With a
//! restart guard, no permit is granted while the guard refuses.

use super::{Acquiring, Attempt, ShareClient, ShareKeys, ms};
use crate::error::BACKEND;
use crate::protocol::share_script;
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, AcquiredPermit, BackendSemaphore, PermitInfo, PermitRequest, SemaphoreBackend,
    SemaphoreInspect,
};
use distlock_core::toolkit::random_owner;
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use redis::Script;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(share_script!("restart_guard.lua", "semaphore_acquire.lua")));

/// A Redis semaphore client, on the connection of a [`crate::RedisLock`]
/// (`lock.semaphore()`).
pub type RedisSemaphore = BackendSemaphore<RedisSemaphoreBackend>;

/// The Redis semaphore adapter: permits as expiring members of a sorted set.
#[derive(Debug)]
pub struct RedisSemaphoreBackend {
    client: ShareClient,
}

impl RedisSemaphoreBackend {
    pub(crate) fn new(client: ShareClient) -> Self {
        RedisSemaphoreBackend { client }
    }

    fn keys(&self, key: &LockKey) -> ShareKeys {
        let mut keys = ShareKeys::new(&self.client.namespace, key, "sem");
        keys.extra.push(keys.sibling("limit"));
        keys
    }

    /// One try of the acquire script.
    async fn attempt(
        &self,
        on: &Acquiring<'_>,
        req: &PermitRequest<'_>,
        waited: bool,
    ) -> Result<Attempt<AcquiredPermit<super::RedisShare>>, LockError> {
        let keys = &on.keys;
        let sent_at = Instant::now();
        let (reply, run_id): (Vec<i64>, _) = on
            .send(|conn| {
                let mut invocation = ACQUIRE.key(&keys.expiry);
                invocation
                    .key(&keys.info)
                    .key(&keys.extra[0])
                    .key(&keys.fence)
                    .key(on.server.state.high_water(&keys.fence));
                invocation
                    .arg(&on.owner)
                    .arg(ms(req.acquire.ttl))
                    .arg(req.limit)
                    .arg(if waited { "1" } else { "0" })
                    .arg(&keys.channel)
                    .arg(conn.publish_command())
                    .arg(on.server.state.keep_ms(req.acquire.ttl));
                invocation
            })
            .await?;
        match reply[..] {
            [1, slot, token] if token > 0 => Ok(Attempt::Won(AcquiredPermit {
                acquired: Acquired {
                    handle: on.share(run_id),
                    token: FencingToken::new(token.unsigned_abs()),
                    sent_at,
                },
                slot: u32::try_from(slot).map_err(|_| bad_reply(&reply))?,
            })),
            [0, hint] => Ok(Attempt::Wait(hint)),
            // The restart guard: no permit until it has passed.
            [2, left] if left > 0 => Ok(Attempt::Wait(left)),
            [3, existing] => Err(req.mismatch(u32::try_from(existing).unwrap_or(u32::MAX))),
            _ => Err(bad_reply(&reply)),
        }
    }
}

fn bad_reply(reply: &[i64]) -> LockError {
    LockError::backend(
        BACKEND,
        format!("the semaphore acquire script returned {reply:?}"),
    )
}

#[async_trait]
impl SemaphoreBackend for RedisSemaphoreBackend {
    type Permit = super::RedisShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.client.capabilities
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<super::RedisShare>, LockError> {
        let keys = Arc::new(self.keys(req.acquire.key));
        let on = (self.client).acquiring(&req.acquire, keys, random_owner())?;
        on.until_won(&req.acquire, |waited| self.attempt(&on, &req, waited))
            .await
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl SemaphoreInspect for RedisSemaphoreBackend {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let permit = |holder, slot: &str, token| {
            let slot = slot.parse().ok()?;
            Some(PermitInfo::new(slot, token, holder))
        };
        (self.client.described(&self.keys(key), permit, |p| p.slot)).await
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        let owners: Vec<String> = (self.permits(key).await?.into_iter())
            .filter(|p| p.slot == slot)
            .map(|p| p.holder)
            .collect();
        if owners.is_empty() {
            return Ok(false);
        }
        Ok(self.client.delete(&self.keys(key), &owners).await? > 0)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        self.client.residue(prefix, &[("sem", "expiry")]).await
    }
}
