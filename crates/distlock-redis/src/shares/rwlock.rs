//! The Redis read-write lock: expiring read shares and one write share of a
//! name, granted in arrival order.
//!
//! Keys (all with the lock's hash tag, see [`ShareKeys`]):
//! `<lock key>:rw:expiry` (owner → expiry ms, every live share),
//! `…:rw:info` (owner → `R:token` or `W:token`), `…:rw:queue` (waiters,
//! `R:<owner>` or `W:<owner>` → arrival number), `…:rw:places` (the same
//! members → when their place expires), `…:rw:arrivals` (the arrival counter),
//! `…:rw:fence` (one token counter for both kinds, never expires), the release
//! channel `…:rw:ch` and each waiter's own channel `…:rw:ch:<owner>`.
//!
//! Invariants: the live shares are either readers only or one writer. A writer
//! enters when no share lives and nobody arrived before it; a reader when no
//! writer holds and no writer arrived before it, so readers that come while a
//! writer waits queue behind it (no writer starvation) and readers waiting
//! behind a writer go before writers that came after them (no reader
//! starvation). A waiter renews its place at every attempt, at least every
//! third of the place's lifetime, so a waiter that vanished holds the queue at
//! most that long; one whose wait ends or is dropped leaves at once. An attempt
//! that finds the head's turn has come (after a release woke another waiter of
//! a client, or a predecessor vanished) wakes the head on its own channel.
//! With a restart guard, no share is granted while the guard refuses, and a
//! refused waiter takes no place: waiters queue afresh once it has passed.

use super::{
    Acquiring, Attempt, Invocation, RedisShare, ShareClient, ShareKeys, ms, place_lifetime,
    queued_wait,
};
use crate::command::CommandConn;
use crate::error::BACKEND;
use crate::protocol::share_script;
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, BackendRwLock, RwLockBackend, RwLockInspect, ShareInfo, WaitUntil,
};
use distlock_core::toolkit::random_owner;
use distlock_core::{Capabilities, FencingToken, LockError, LockKey, RwMode};
use redis::Script;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(share_script!("restart_guard.lua", "rwlock_acquire.lua")));
static UNQUEUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/rwlock_unqueue.lua")));

/// A Redis read-write lock client, on the connection of a [`crate::RedisLock`]
/// (`lock.rwlock()`).
pub type RedisRwLock = BackendRwLock<RedisRwLockBackend>;

/// The Redis read-write lock adapter.
#[derive(Debug)]
pub struct RedisRwLockBackend {
    client: ShareClient,
}

impl RedisRwLockBackend {
    pub(crate) fn new(client: ShareClient) -> Self {
        RedisRwLockBackend { client }
    }

    fn keys(&self, key: &LockKey) -> ShareKeys {
        ShareKeys::new(&self.client.namespace, key, "rw")
    }

    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<RedisShare>, LockError> {
        let keys = Arc::new(self.keys(req.key));
        let owner = random_owner();
        let member = format!("{}:{owner}", kind(mode));
        let leave = {
            let (queue, places) = (keys.sibling("queue"), keys.sibling("places"));
            let (member, channel) = (member.clone(), keys.channel.clone());
            Arc::new(move |conn: &CommandConn| {
                let mut invocation = UNQUEUE.key(&queue);
                invocation
                    .key(&places)
                    .arg(&member)
                    .arg(&channel)
                    .arg(conn.publish_command());
                invocation
            }) as Invocation
        };
        let own_channel = format!("{}:{owner}", keys.channel);
        let mut on = self.client.acquiring(&req, keys, owner)?;
        on.own_channel = Some(own_channel);
        on.leave = Some(leave);
        on.until_won(&req, |_| self.attempt(&on, &req, mode)).await
    }

    /// One try of the acquire script.
    async fn attempt(
        &self,
        on: &Acquiring<'_>,
        req: &AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Attempt<Acquired<RedisShare>>, LockError> {
        let keys = &on.keys;
        let queued = req.wait != WaitUntil::No;
        let place = place_lifetime(req);
        let sent_at = Instant::now();
        let (reply, run_id): (Vec<i64>, _) = on
            .send(|conn| {
                let mut invocation = ACQUIRE.key(&keys.expiry);
                invocation
                    .key(&keys.info)
                    .key(keys.sibling("queue"))
                    .key(keys.sibling("places"))
                    .key(keys.sibling("arrivals"))
                    .key(&keys.fence)
                    .key(on.server.state.high_water(&keys.fence));
                invocation
                    .arg(&on.owner)
                    .arg(ms(req.ttl))
                    .arg(kind(mode))
                    .arg(ms(place))
                    .arg(&keys.channel)
                    .arg(conn.publish_command())
                    .arg(on.server.state.keep_ms(req.ttl));
                invocation
            })
            .await?;
        match reply[..] {
            [1, token] if token > 0 => Ok(Attempt::Won(Acquired {
                handle: on.share(run_id),
                token: FencingToken::new(token.unsigned_abs()),
                sent_at,
            })),
            [0, hint] if queued => Ok(Attempt::Wait(queued_wait(hint, place))),
            [0, hint] => Ok(Attempt::Wait(hint)),
            // The restart guard: no share until it has passed.
            [2, left] if left > 0 => Ok(Attempt::Wait(left)),
            _ => Err(LockError::backend(
                BACKEND,
                format!("the read-write lock acquire script returned {reply:?}"),
            )),
        }
    }
}

/// A share's kind as the scripts write it.
fn kind(mode: RwMode) -> &'static str {
    match mode {
        RwMode::Read => "R",
        RwMode::Write => "W",
    }
}

#[async_trait]
impl RwLockBackend for RedisRwLockBackend {
    type Share = RedisShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.client.capabilities
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<RedisShare>, LockError> {
        self.acquire(req, RwMode::Read).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<RedisShare>, LockError> {
        self.acquire(req, RwMode::Write).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

#[async_trait]
impl RwLockInspect for RedisRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let share = |holder, mode: &str, token| {
            let mode = match mode {
                "R" => RwMode::Read,
                "W" => RwMode::Write,
                _ => return None,
            };
            Some(ShareInfo::new(mode, token, holder))
        };
        (self.client.described(&self.keys(key), share, |s| s.token)).await
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        self.client.delete(&self.keys(key), &[]).await
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let sets = [("rw", "expiry"), ("rw", "places")];
        self.client.residue(prefix, &sets).await
    }
}
