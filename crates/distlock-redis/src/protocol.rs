//! One Redis server as the lock protocol sees it: the four scripts, `WAIT`, and
//! the shared subscriber. `RedisLock` uses one node, `Redlock` N of them.

use crate::error::NodeError;
use crate::keys::LockKeys;
use crate::link::Link;
use crate::scripts;
use crate::server::Server;
use crate::subscriber::{Subscriber, SubscriberTimeouts};
use distlock_core::LockError;
use std::sync::Arc;
use std::time::Duration;

/// The acquire script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Won, with this node's fencing token.
    Won(u64),
    /// Held elsewhere; the holder's remaining ttl in ms (-1: no expiry).
    Held(i64),
}

/// Timeouts for one server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeTimeouts {
    pub connect: Duration,
    pub response: Duration,
}

/// One server: its command connection and its shared subscriber.
pub(crate) struct Node {
    /// The server's address without credentials, for errors and logs.
    pub endpoint: Arc<str>,
    link: Link,
    /// Release notifications for this client's waiters.
    pub subscriber: Subscriber,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// A compare-owner script's 1/0 answer.
fn flag(reply: Result<i64, NodeError>, what: &str) -> Result<bool, NodeError> {
    match reply? {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(NodeError::Reply(format!("{what} script returned {other}"))),
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl Node {
    /// A node for `server`; connects on first use.
    pub fn new(
        server: &Server,
        backend: &'static str,
        timeouts: NodeTimeouts,
    ) -> Result<Self, LockError> {
        let endpoint: Arc<str> = server.endpoint().into();
        // The subscriber reads RESP2 pub/sub frames whatever protocol commands use.
        let resp2 = Server {
            resp3: false,
            ..server.clone()
        };
        let subscriber = Subscriber::start(
            resp2.client(backend)?,
            endpoint.clone(),
            SubscriberTimeouts {
                connect: timeouts.connect,
                response: timeouts.response,
            },
        );
        Ok(Node {
            endpoint,
            link: Link::new(server.client(backend)?, timeouts.connect),
            subscriber,
        })
    }

    /// Connects, authenticates and loads every script in one round trip, so that
    /// a wrong password or a server without scripting is reported at connect time.
    pub async fn check(&self, budget: Duration) -> Result<(), NodeError> {
        let mut pipe = redis::pipe();
        for (source, _) in scripts::all() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        self.link
            .call(budget, |mut conn| {
                let pipe = pipe.clone();
                async move {
                    let hashes: Vec<String> = pipe.query_async(&mut conn).await?;
                    let expected: Vec<&str> =
                        scripts::all().iter().map(|(_, s)| s.get_hash()).collect();
                    if hashes != expected {
                        return Err(NodeError::Reply(format!(
                            "SCRIPT LOAD gave {hashes:?}, expected {expected:?}"
                        )));
                    }
                    Ok(())
                }
            })
            .await
    }

    /// Runs the acquire script: `SET NX PX` and a fresh token, or the holder's PTTL.
    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        budget: Duration,
    ) -> Result<Attempt, NodeError> {
        // The inner timeout fires first, so that an unanswered acquire is undone
        // on its own connection: queued behind the acquire, the release cannot
        // overtake it, as it could on a fresh connection.
        let reply: Vec<i64> = self
            .link
            .call(budget + UNDO_GRACE, |mut conn| {
                let mut invocation = scripts::ACQUIRE_SCRIPT.key(&keys.lock);
                invocation.key(&keys.fence).arg(owner).arg(ttl_ms(ttl));
                let mut undo = UndoOnConnection {
                    conn: Some(conn.clone()),
                    keys: keys.clone(),
                    owner: owner.to_owned(),
                };
                async move {
                    let reply =
                        tokio::time::timeout(budget, invocation.invoke_async(&mut conn)).await;
                    match reply {
                        Ok(reply) => {
                            // Answered: the caller owns the outcome from here.
                            undo.disarm();
                            Ok(reply?)
                        }
                        Err(_) => Err(NodeError::Timeout(budget)),
                    }
                }
            })
            .await?;
        match reply[..] {
            [1, token] if token > 0 => Ok(Attempt::Won(token.unsigned_abs())),
            [0, pttl] => Ok(Attempt::Held(pttl)),
            _ => Err(NodeError::Reply(format!(
                "acquire script returned {reply:?}"
            ))),
        }
    }

    /// Extends the lock if `owner` still holds it.
    pub async fn renew(
        &self,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        budget: Duration,
    ) -> Result<bool, NodeError> {
        let reply = self
            .invoke(budget, || {
                let mut invocation = scripts::RENEW_SCRIPT.key(&keys.lock);
                invocation.arg(owner).arg(ttl_ms(ttl));
                invocation
            })
            .await;
        flag(reply, "renew")
    }

    /// Deletes the lock and publishes on its channel if `owner` still holds it.
    pub async fn release(
        &self,
        keys: &LockKeys,
        owner: &str,
        budget: Duration,
    ) -> Result<bool, NodeError> {
        let reply = self
            .invoke(budget, || {
                let mut invocation = scripts::RELEASE_SCRIPT.key(&keys.lock);
                invocation.arg(owner).arg(&keys.channel);
                invocation
            })
            .await;
        flag(reply, "release")
    }

    /// Raises the fence counter to at least `token`.
    pub async fn raise_fence(
        &self,
        keys: &LockKeys,
        token: u64,
        budget: Duration,
    ) -> Result<(), NodeError> {
        let reply = self
            .invoke(budget, || {
                let mut invocation = scripts::RAISE_FENCE_SCRIPT.key(&keys.fence);
                invocation.arg(token);
                invocation
            })
            .await;
        match flag(reply, "raise_fence")? {
            true => Ok(()),
            false => Err(NodeError::Reply("raise_fence script returned 0".into())),
        }
    }

    /// Sends a script invocation (`EVALSHA`, loading the script on `NOSCRIPT`).
    async fn invoke<T>(
        &self,
        budget: Duration,
        build: impl Fn() -> redis::ScriptInvocation<'static>,
    ) -> Result<T, NodeError>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        self.link
            .call(budget, |mut conn| {
                let invocation = build();
                async move { Ok(invocation.invoke_async(&mut conn).await?) }
            })
            .await
    }

    /// `WAIT replicas timeout`: how many replicas acknowledged this connection's
    /// writes so far. The server blocks up to `timeout`, so the budget covers it.
    pub async fn wait_replicas(
        &self,
        replicas: u32,
        timeout: Duration,
        budget: Duration,
    ) -> Result<u32, NodeError> {
        let acked: i64 = self
            .link
            .call(timeout + budget, |mut conn| async move {
                Ok(redis::cmd("WAIT")
                    .arg(replicas)
                    .arg(ttl_ms(timeout))
                    .query_async(&mut conn)
                    .await?)
            })
            .await?;
        u32::try_from(acked).map_err(|_| NodeError::Reply(format!("WAIT returned {acked}")))
    }
}

/// How much longer than its own timeout an acquire may take before the
/// connection-level timeout gives up on it.
const UNDO_GRACE: Duration = Duration::from_millis(50);

/// Undoes an acquire request that was cancelled or timed out before its reply,
/// by queueing the compare-owner release on the same connection.
struct UndoOnConnection {
    conn: Option<redis::aio::MultiplexedConnection>,
    keys: LockKeys,
    owner: String,
}

impl UndoOnConnection {
    fn disarm(&mut self) {
        self.conn = None;
    }
}

impl Drop for UndoOnConnection {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut invocation = scripts::RELEASE_SCRIPT.key(&self.keys.lock);
        invocation.arg(&self.owner).arg(&self.keys.channel);
        // Queued now, while still in order behind the acquire; awaited in the
        // background. The ttl frees the key if this fails too.
        let queued = async move {
            let undone: redis::RedisResult<i64> = invocation.invoke_async(&mut conn).await;
            if let Err(e) = undone {
                tracing::debug!(error = %e, "undoing an unanswered acquire failed; the ttl frees the key");
            }
        };
        runtime.spawn(queued);
    }
}

/// Releases an acquisition whose outcome the caller will never use: a request
/// whose reply was lost, or that was cancelled mid-flight, may still have taken
/// the lock on the server. The release compares the owner value, so it can only
/// ever delete this attempt's own key.
pub(crate) struct ReleaseOnDrop {
    nodes: Vec<Arc<Node>>,
    keys: LockKeys,
    owner: String,
    budget: Duration,
    armed: bool,
}

impl ReleaseOnDrop {
    pub fn new(nodes: Vec<Arc<Node>>, keys: &LockKeys, owner: &str, budget: Duration) -> Self {
        ReleaseOnDrop {
            nodes,
            keys: keys.clone(),
            owner: owner.to_owned(),
            budget,
            armed: true,
        }
    }

    /// The outcome is known and handled: nothing to undo.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from: the ttl frees the key.
            return;
        };
        let (keys, owner, budget) = (
            self.keys.clone(),
            std::mem::take(&mut self.owner),
            self.budget,
        );
        let nodes = std::mem::take(&mut self.nodes);
        runtime.spawn(async move {
            let mut releases = tokio::task::JoinSet::new();
            for node in nodes {
                let (keys, owner) = (keys.clone(), owner.clone());
                releases.spawn(async move {
                    if let Err(e) = node.release(&keys, &owner, budget).await {
                        tracing::debug!(endpoint = %node.endpoint, error = %e, "undoing an abandoned acquire failed; the ttl frees the key");
                    }
                });
            }
            while releases.join_next().await.is_some() {}
        });
    }
}
