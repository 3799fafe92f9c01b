//! The Redis read-write lock: expiring read shares and one write share of a
//! name, and a queue of waiting writers that later readers respect.
//!
//! Keys (all with the lock's hash tag, see [`ShareKeys`]):
//! `<lock key>:rw:expiry` (owner → expiry ms, every live share),
//! `…:rw:info` (owner → `R:token` or `W:token`), `…:rw:writers` (waiting
//! writers: owner → marker expiry ms), `…:rw:fence` (one token counter for both
//! kinds, never expires) and the channel `…:rw:ch`.
//!
//! Invariants: the live shares are either readers only or one writer (a writer
//! enters only when the expiry set is empty, a reader only when it holds no
//! writer); a reader does not enter while a writer waits, so a stream of
//! readers cannot starve a writer. A waiting writer renews its marker at each
//! attempt (at least every third of its lifetime, the request's ttl), so a
//! writer that vanished holds readers back at most that long; one whose wait
//! ends or is dropped takes its marker out at once and wakes the readers.

use super::{
    Acquiring, Attempt, Invocation, RedisShare, ShareKeys, delete, fail, live, ms, residue,
    share_script,
};
use crate::backend::BACKEND;
use crate::protocol::ServerClient;
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired};
use distlock_core::toolkit::random_owner;
use distlock_core::{
    BackendRwLock, Capabilities, FencingToken, LockError, LockKey, RwLockBackend, RwLockInspect,
    RwMode, ShareInfo,
};
use redis::Script;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(share_script!("rwlock_acquire.lua")));
static UNQUEUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/rwlock_unqueue.lua")));

/// A Redis read-write lock client, on the connection of a [`crate::RedisLock`]
/// (`lock.rwlock()`).
pub type RedisRwLock = BackendRwLock<RedisRwLockBackend>;

/// The Redis read-write lock adapter.
pub struct RedisRwLockBackend {
    server: Arc<ServerClient>,
    namespace: String,
    budget: Duration,
    capabilities: Capabilities,
}

impl std::fmt::Debug for RedisRwLockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRwLockBackend")
            .field("endpoint", &self.server.endpoint)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisRwLockBackend {
    pub(crate) fn new(
        server: Arc<ServerClient>,
        namespace: String,
        budget: Duration,
        capabilities: Capabilities,
    ) -> Self {
        RedisRwLockBackend {
            server,
            namespace,
            budget,
            capabilities,
        }
    }

    fn keys(&self, key: &LockKey) -> ShareKeys {
        ShareKeys::new(&self.namespace, key, "rw")
    }

    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<RedisShare>, LockError> {
        let keys = Arc::new(self.keys(req.key));
        let owner = random_owner();
        let unqueue = (mode == RwMode::Write).then(|| {
            let (writers, owner, channel) =
                (keys.sibling("writers"), owner.clone(), keys.channel.clone());
            Box::new(move || {
                let mut invocation = UNQUEUE.key(&writers);
                invocation.arg(&owner).arg(&channel);
                invocation
            }) as Invocation
        });
        let on = Acquiring {
            server: &self.server,
            keys,
            budget: self.budget,
            owner,
        };
        on.until_won(&req, unqueue, |waited| {
            self.attempt(&on, &req, mode, waited)
        })
        .await
    }

    /// One try of the acquire script.
    async fn attempt(
        &self,
        on: &Acquiring<'_>,
        req: &AcquireRequest<'_>,
        mode: RwMode,
        waited: bool,
    ) -> Result<Attempt<Acquired<RedisShare>>, LockError> {
        let keys = &on.keys;
        let queued = mode == RwMode::Write && req.wait != distlock_core::backend::WaitUntil::NoWait;
        let marker = if queued { req.ttl } else { Duration::ZERO };
        let sent_at = Instant::now();
        let reply: Vec<i64> = self
            .server
            .invoke(self.budget, || {
                let mut invocation = ACQUIRE.key(&keys.expiry);
                invocation
                    .key(&keys.info)
                    .key(keys.sibling("writers"))
                    .key(&keys.fence);
                invocation
                    .arg(&on.owner)
                    .arg(ms(req.ttl))
                    .arg(if mode == RwMode::Read { "R" } else { "W" })
                    .arg(if waited { "1" } else { "0" })
                    .arg(&keys.channel)
                    .arg(ms(marker));
                invocation
            })
            .await
            .map_err(|e| fail(&self.server, e))?;
        match reply[..] {
            [1, token] if token > 0 => Ok(Attempt::Won(Acquired {
                handle: on.share(),
                token: FencingToken::new(token.unsigned_abs()),
                sent_at,
            })),
            // A queued writer comes back before its marker expires.
            [0, hint] if queued => Ok(Attempt::Wait(hint.min(ms_i64(marker / 3)))),
            [0, hint] => Ok(Attempt::Wait(hint)),
            _ => Err(LockError::backend(
                BACKEND,
                format!("the read-write lock acquire script returned {reply:?}"),
            )),
        }
    }
}

fn ms_i64(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[async_trait]
impl RwLockBackend for RedisRwLockBackend {
    type Share = RedisShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
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

/// A share's `R:token` / `W:token` description.
fn parse_share(owner: String, described: &str) -> Option<ShareInfo> {
    let (mode, token) = described.split_once(':')?;
    Some(ShareInfo {
        mode: match mode {
            "R" => RwMode::Read,
            "W" => RwMode::Write,
            _ => return None,
        },
        token: FencingToken::new(token.parse().ok()?),
        holder: owner,
    })
}

#[async_trait]
impl RwLockInspect for RedisRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let keys = self.keys(key);
        let shares = live(&self.server, &keys.expiry, &keys.info, self.budget).await?;
        let mut shares: Vec<ShareInfo> = shares
            .into_iter()
            .filter_map(|(owner, described)| parse_share(owner, &described))
            .collect();
        shares.sort_by_key(|s| s.token);
        Ok(shares)
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        delete(&self.server, &self.keys(key), &[], self.budget).await
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let (namespace, budget) = (&self.namespace, self.budget);
        let mut found = residue(&self.server, namespace, prefix, ("rw", "expiry"), budget).await?;
        found.extend(residue(&self.server, namespace, prefix, ("rw", "writers"), budget).await?);
        Ok(found)
    }
}
