//! Shares: the expiring holdings of the semaphore (permits) and of the
//! read-write lock (read and write shares), written once for both.
//!
//! A share is a member (its random owner value) of the primitive's expiry
//! sorted set, scored by its expiry in server milliseconds, with its
//! description in a hash under the same member. Every script sweeps the
//! expired members first, so a crashed holder's share ends at its ttl without
//! anyone deleting it. Renew and release compare the member, so a client only
//! ever touches its own share; release publishes on the primitive's channel
//! (with the connection's publish command: `SPUBLISH` in a Redis Cluster, so
//! the sharded subscriber hears it).
//!
//! Waiting is the lock's ([`turns`]): the waiter registers on the client's
//! shared subscriber, attempts only once subscribed, and sleeps until a
//! message or the hint the script returned (when the soonest share expires),
//! polling while the subscriber is down.
//!
//! A server that restarted or failed over is handled as for the lock: each
//! share is registered with the restart check under the `run_id` of the
//! connection its acquire ran on (its member is read after a reconnect to
//! another server process, and a missing one fires `lost()` at once), and with
//! a restart guard the acquire scripts arm and honour the namespace's marker,
//! refusing every grant until the guard has passed.

use crate::backend::RedisBackend;
use crate::command::CommandConn;
use crate::connection::{Link, RunId};
use crate::error::{BACKEND, CommandError};
use crate::keys::LockKeys;
use crate::protocol::{ServerClient, flag, loss_signal, share_script, ttl_ms as ms};
use crate::restart::{Place, RestartGuard};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Holding, LossSignal, Ownership};
use distlock_core::toolkit::{CancelGuard, UndoFuture};
use distlock_core::{Capabilities, LockError, LockKey};
use redis::Script;
use rwlock::RedisRwLockBackend;
use semaphore::RedisSemaphoreBackend;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

mod inspect;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod turns;

pub(crate) use inspect::residue;
pub(crate) use turns::{Attempt, place_lifetime, queued_wait, take_turns};

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(share_script!("share_renew.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(share_script!("share_release.lua")));

/// What the semaphore and the read-write lock of one client share: the
/// lock's server connection, namespace, reply budget, restart guard and
/// capabilities.
pub(crate) struct ShareClient {
    pub server: Arc<ServerClient>,
    pub namespace: String,
    pub budget: Duration,
    pub guard: Option<RestartGuard>,
    pub capabilities: Capabilities,
}

impl ShareClient {
    /// One acquire of `keys` by `owner` on this client, once the restart
    /// guard allows `req`'s ttl; a primitive whose waiters queue sets its own
    /// channel and how to leave the queue.
    pub fn acquiring(
        &self,
        req: &AcquireRequest<'_>,
        keys: Arc<ShareKeys>,
        owner: String,
    ) -> Result<Acquiring<'_>, LockError> {
        RestartGuard::check(self.guard.as_ref(), req.ttl)?;
        Ok(Acquiring {
            server: &self.server,
            keys,
            budget: self.budget,
            owner,
            own_channel: None,
            leave: None,
            guard: self.guard.as_ref(),
        })
    }
}

impl std::fmt::Debug for ShareClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareClient")
            .field("endpoint", &self.server.endpoint)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The semaphore and read-write lock on `backend`'s connection.
pub(crate) fn offered_on(backend: &RedisBackend) -> (RedisSemaphoreBackend, RedisRwLockBackend) {
    let client = || ShareClient {
        server: backend.server.clone(),
        namespace: backend.namespace().into(),
        budget: backend.timeout,
        guard: backend.guard.clone(),
        capabilities: RedisBackend::CAPABILITIES,
    };
    (
        RedisSemaphoreBackend::new(client()),
        RedisRwLockBackend::new(client()),
    )
}

/// The Redis names of one semaphore or read-write lock: `<lock key>:<kind>:…`,
/// so they share the lock's hash tag (one Cluster slot) but never its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShareKeys {
    /// Sorted set: owner value → expiry in server ms.
    pub expiry: String,
    /// Hash: owner value → the share's description.
    pub info: String,
    /// The token counter; never expires.
    pub fence: String,
    /// Releases are published here.
    pub channel: String,
    /// Further bookkeeping dropped with the last share (the semaphore's limit).
    pub extra: Vec<String>,
}

impl ShareKeys {
    /// The keys of primitive `kind` (`sem`, `rw`) named `key`.
    pub fn new(namespace: &str, key: &LockKey, kind: &str) -> Self {
        let base = format!("{}:{kind}", LockKeys::new(namespace, key).lock);
        ShareKeys {
            expiry: format!("{base}:expiry"),
            info: format!("{base}:info"),
            fence: format!("{base}:fence"),
            channel: format!("{base}:ch"),
            extra: Vec::new(),
        }
    }

    /// Another key of the same primitive, `<lock key>:<kind>:<name>`.
    pub fn sibling(&self, name: &str) -> String {
        let base = self.expiry.trim_end_matches("expiry");
        format!("{base}{name}")
    }
}

/// One held semaphore permit or read-write lock share: what renewing and
/// releasing it needs (the lease machinery drives it through `Holding`).
pub struct RedisShare {
    server: Arc<ServerClient>,
    keys: Arc<ShareKeys>,
    owner: String,
    budget: Duration,
    /// The server process that granted it.
    run_id: RunId,
}

impl std::fmt::Debug for RedisShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisShare")
            .field("expiry", &self.keys.expiry)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

fn release_invocation(
    keys: &ShareKeys,
    owner: &str,
    conn: &CommandConn,
) -> redis::ScriptInvocation<'static> {
    let mut invocation = RELEASE.key(&keys.expiry);
    invocation.key(&keys.info);
    for extra in &keys.extra {
        invocation.key(extra);
    }
    invocation
        .arg(owner)
        .arg(&keys.channel)
        .arg(conn.publish_command());
    invocation
}

fn ownership(reply: Result<i64, CommandError>, what: &str) -> Result<Ownership, CommandError> {
    Ok(match flag(reply, what)? {
        true => Ownership::Held,
        false => Ownership::NotHeld,
    })
}

/// A command error as the `LockError` of this server.
pub(crate) fn fail(server: &ServerClient, e: CommandError) -> LockError {
    e.into_lock_error(BACKEND, &server.endpoint)
}

#[async_trait]
impl Holding for RedisShare {
    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        let reply = self
            .server
            .invoke(self.budget, || {
                let mut invocation = RENEW.key(&self.keys.expiry);
                invocation
                    .key(&self.keys.info)
                    .key(&self.keys.fence)
                    .arg(&self.owner)
                    .arg(ms(ttl))
                    .arg(self.server.state.keep_ms(ttl));
                invocation
            })
            .await;
        ownership(reply, "share renew").map_err(|e| fail(&self.server, e))
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let reply = self
            .server
            .invoke_on(self.budget, |conn| {
                release_invocation(&self.keys, &self.owner, conn)
            })
            .await;
        ownership(reply, "share release").map_err(|e| fail(&self.server, e))
    }

    fn loss_signal(&self) -> Option<LossSignal> {
        let granted = vec![(self.server.clone(), self.run_id.clone())];
        let place = Place::Member(self.keys.expiry.as_str().into());
        Some(loss_signal(granted, place, self.owner.to_string(), 1))
    }
}

/// Builds a script call, once per send, for the connection it goes out on.
pub(crate) type Invocation =
    Arc<dyn Fn(&CommandConn) -> redis::ScriptInvocation<'static> + Send + Sync>;

/// One acquire: the primitive's server, keys and reply budget, and the random
/// owner value its attempts share (a retried script finds its own share, and
/// a waiting writer's marker stays one entry).
pub(crate) struct Acquiring<'a> {
    pub server: &'a Arc<ServerClient>,
    pub keys: Arc<ShareKeys>,
    pub budget: Duration,
    pub owner: String,
    /// The waiter's own channel, when others hand it the turn by name.
    pub own_channel: Option<String>,
    /// Leaving the queue, for a primitive whose waiters keep a place in one.
    pub leave: Option<Invocation>,
    /// The namespace's restart guard, if the client has one.
    pub guard: Option<&'a RestartGuard>,
}

impl Acquiring<'_> {
    /// The share, once won on the server with `run_id`.
    pub fn share(&self, run_id: RunId) -> RedisShare {
        RedisShare {
            server: self.server.clone(),
            keys: self.keys.clone(),
            owner: self.owner.clone(),
            budget: self.budget,
            run_id,
        }
    }

    /// What gives back anything this acquire may have taken: the
    /// compare-owner release (it can only ever end this acquire's own share),
    /// then leaving the queue.
    fn undo_scripts(&self, conn: &CommandConn) -> Vec<redis::ScriptInvocation<'static>> {
        let release = release_invocation(&self.keys, &self.owner, conn);
        std::iter::once(release)
            .chain(self.leave.as_ref().map(|leave| leave(conn)))
            .collect()
    }

    /// Sends one attempt's script, with the restart guard's key and arguments
    /// after its own when the client has a guard; if it is cut off or
    /// unanswered, the undo follows it on its connection. Returns the reply
    /// and the `run_id` of the server that gave it.
    pub async fn send<T>(
        &self,
        script: impl Fn(&CommandConn) -> redis::ScriptInvocation<'static>,
    ) -> Result<(T, RunId), LockError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let guarded = |link: &Link| {
            let mut invocation = script(&link.conn);
            RestartGuard::pass(self.guard, &mut invocation, &link.run_id);
            invocation
        };
        let sent = self
            .server
            .invoke_or_undo(self.budget, guarded, |conn| self.undo_scripts(conn));
        sent.await.map_err(|e| fail(self.server, e))
    }

    /// Runs the undo in the background unless disarmed: for an acquire dropped
    /// or ended while it sleeps between attempts.
    fn undo_on_drop(&self) -> CancelGuard<(), impl FnOnce(()) -> Option<UndoFuture> + use<>> {
        let (server, budget) = (self.server.clone(), self.budget);
        let (keys, owner, leave) = (self.keys.clone(), self.owner.clone(), self.leave.clone());
        let release: Invocation = Arc::new(move |conn| release_invocation(&keys, &owner, conn));
        CancelGuard::new((), move |()| {
            Some(Box::pin(async move {
                for build in std::iter::once(release).chain(leave) {
                    let undone: Result<i64, _> = server.invoke_on(budget, &*build).await;
                    if let Err(e) = undone {
                        tracing::debug!(endpoint = %server.endpoint, error = %e, "undoing an abandoned share attempt failed; its ttl frees it");
                    }
                }
            }) as UndoFuture)
        })
    }

    /// Runs `attempt` (told whether the caller has been waiting) in turns
    /// ([`take_turns`]) until it wins or `req.wait` ends. Cancel-safe: unless
    /// it wins, or its last attempt was answered and refused (`Busy`,
    /// `LimitMismatch`), the undo gives back what an attempt may have taken.
    pub async fn until_won<T, F, Fut>(
        &self,
        req: &AcquireRequest<'_>,
        attempt: F,
    ) -> Result<T, LockError>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Result<Attempt<T>, LockError>>,
    {
        let undo = self.undo_on_drop();
        let channels = (self.keys.channel.as_str(), self.own_channel.as_deref());
        let outcome = take_turns(self.server, channels, req, self.budget, attempt).await;
        if matches!(
            outcome,
            Ok(_) | Err(LockError::Busy { .. } | LockError::LimitMismatch { .. })
        ) {
            undo.disarm();
        }
        outcome
    }
}

#[cfg(test)]
mod tests;
