//! The adapter: connecting, and acquire, renew, release and loss as core asks for
//! them.
//!
//! Invariant: a lock is held by the ephemeral-sequential node first in line
//! under its directory, for as long as that node's session lives. Acquire queues
//! one node on the session for the lease's ttl (see `queue.rs`) and holds when it
//! is first; renew proves, with one `exists`, that the node is still ours and the
//! session alive; release deletes the node; the session's end is the loss signal.

use crate::error::ZkError;
use crate::keys::{self, NodeKind};
use crate::protocol::{self, OwnNode, Requests};
use crate::queue::{self, QueuedNode, Turn};
use crate::session::{Session, SessionSettings, Sessions};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, LossSignal, Ownership, WaitUntil};
use distlock_core::toolkit::Inspect;
use distlock_core::{Capabilities, FencingToken, LockError, LossReason, Support};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acl};

/// The smallest ttl reported while the server's minimum session timeout is not
/// known yet; acquires below the real minimum still fail with a clear error.
const UNKNOWN_MIN_TTL: Duration = Duration::from_millis(1);

/// Why a minimum hold is refused: TTL nodes would keep a node past its
/// session, but only on servers started with `zookeeper.extendedTypesEnabled`,
/// a setting most deployments lack and this adapter does not ask for.
const NO_MIN_HOLD: &str = "a ZooKeeper lock is an ephemeral node, deleted when its holder's session ends; use a Redis, Redlock, or SQL version_cas lock for a minimum hold";

/// How long the `conf` four-letter word may take at connect.
const CONF_TIMEOUT: Duration = Duration::from_secs(2);

/// What the adapter needs from the configuration.
pub(crate) struct Settings {
    pub sessions: SessionSettings,
    /// The node holding every lock directory, relative to the chroot.
    pub namespace: String,
    pub acls: Vec<Acl>,
    /// The longest wait for one reply.
    pub timeout: Duration,
    /// `zk://h1:2181,h2/chroot`, for errors (never with credentials).
    pub endpoint: String,
    /// The chroot as configured, for the error when it does not exist.
    pub chroot: Option<String>,
    /// `host:port` of the first server, for four-letter words.
    pub first_server: Option<String>,
}

/// A ZooKeeper lock client: `ZkConfig::from_url(url)?.connect().await?`.
pub type ZkLock = distlock_core::adapter::BackendLock<ZkBackend>;

/// The ZooKeeper adapter. Use it through [`ZkLock`].
#[derive(Debug)]
pub struct ZkBackend {
    pub(crate) sessions: Sessions,
    pub(crate) namespace: String,
    pub(crate) requests: Requests,
    pub(crate) endpoint: String,
    pub(crate) first_server: Option<String>,
}

impl ZkBackend {
    /// Opens a first session, which checks that the servers answer, the
    /// credentials are accepted and the chroot exists, and learns the server's
    /// session timeout range.
    pub(crate) async fn connect(settings: Settings) -> Result<Self, LockError> {
        let backend = ZkBackend {
            sessions: Sessions::new(settings.sessions),
            namespace: settings.namespace,
            requests: Requests::new(settings.acls, settings.timeout),
            endpoint: settings.endpoint,
            first_server: settings.first_server,
        };
        let first = backend
            .sessions
            .open_first()
            .await
            .map_err(|e| backend.error(e))?;
        match backend.requests.node_stat(&first.client, "/").await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(LockError::config(
                    "zookeeper",
                    format!(
                        "chroot `{}` does not exist on {}; create it (zkCli.sh create {0}) or fix the URL path",
                        settings.chroot.as_deref().unwrap_or("/"),
                        backend.endpoint
                    ),
                ));
            }
            Err(e) => return Err(backend.error(e)),
        }
        // After the session, not before: a server that is still starting answers
        // four-letter words with "not currently serving requests". Best effort:
        // without `conf` the range is learned from the first negotiation that
        // hits a bound.
        if let Some(server) = &backend.first_server
            && let Ok(conf) = protocol::four_letter_word(server, "conf", CONF_TIMEOUT).await
            && let Some((min, max)) = protocol::session_limits(&conf)
        {
            backend
                .sessions
                .set_limits(Duration::from_millis(min), Duration::from_millis(max));
        }
        backend.requests.reset_count();
        Ok(backend)
    }

    /// How many requests this client has sent (create, list, watch, exists,
    /// delete), for measuring round trips per operation.
    pub fn requests_sent(&self) -> u64 {
        self.requests.sent()
    }

    /// The lock directory of `name`: `/{namespace}/{escaped name}`.
    pub fn lock_dir(&self, name: &str) -> String {
        keys::lock_dir(&self.namespace, name)
    }

    /// The capabilities against a server whose `minSessionTimeout` is `min_ttl`:
    /// what a harness can know before it connects.
    pub fn capabilities_with_min_ttl(min_ttl: Duration) -> Capabilities {
        // Every directory is a container node the server reaps once empty.
        Capabilities::consensus_queue(min_ttl, Duration::from_millis(1))
            .state_collection(Support::Offered)
            .min_hold(Support::NotOffered(NO_MIN_HOLD))
    }

    /// Queues a node of `kind` holding `data` in `dir` on the session for the
    /// ttl, and waits per `req.wait` until nothing blocks it (see `queue.rs`):
    /// the lock's acquire, and a candidate's, reader's or writer's.
    pub(crate) async fn queue_up(
        &self,
        req: AcquireRequest<'_>,
        dir: String,
        kind: NodeKind,
        data: Vec<u8>,
    ) -> Result<Acquired<ZkHandle>, LockError> {
        let wait_ends = wait_ends(req.wait);
        tokio::pin!(wait_ends);
        let session = tokio::select! {
            session = self.sessions.for_ttl(req.ttl, &self.endpoint) => session?,
            _ = &mut wait_ends => return Err(req.not_acquired()),
        };
        let mut queued = queue::enqueue(session, dir, kind, data);
        let outcome = match queued.state_mut() {
            Some(node) => tokio::select! {
                outcome = queue::wait_for_turn(&self.requests, node, req.wait, None) => {
                    outcome.map_err(|e| self.error(e))?
                }
                _ = &mut wait_ends => None,
            },
            None => None,
        };
        let Some(Turn { sent_at, own, .. }) = outcome else {
            if let Some(node) = queued.state_mut() {
                queue::withdraw(&self.requests, node).await;
            }
            return Err(req.not_acquired());
        };
        let token = czxid_token(&own)?;
        let Some(QueuedNode { session, dir, .. }) = queued.disarm() else {
            return Err(req.not_acquired());
        };
        let node = keys::node_path(&dir, &own.name);
        Ok(Acquired {
            handle: ZkHandle::new(session, node, own.czxid, req.ttl, sent_at),
            token,
            sent_at,
        })
    }

    pub(crate) fn error(&self, e: ZkError) -> LockError {
        e.into_lock_error(&self.endpoint)
    }
}

#[async_trait]
impl Backend for ZkBackend {
    type Handle = ZkHandle;

    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        Self::capabilities_with_min_ttl(self.sessions.min_timeout().unwrap_or(UNKNOWN_MIN_TTL))
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<ZkHandle>, LockError> {
        let dir = self.lock_dir(req.key.as_str());
        let meta = req.meta.encode().into_bytes();
        self.queue_up(req, dir, NodeKind::Lock, meta).await
    }

    async fn renew(&self, handle: &ZkHandle, _ttl: Duration) -> Result<Ownership, LockError> {
        let session = &handle.session;
        match session.state() {
            state if state.is_terminated() => return Ok(Ownership::NotHeld),
            zk::SessionState::SyncConnected => {}
            // While disconnected the session may be alive or not: only the local
            // deadline can decide, so report an error and let it run.
            _ => {
                return Err(self.error(ZkError::Disconnected {
                    session: session.id(),
                }));
            }
        }
        let sent_at = Instant::now();
        match self.requests.node_stat(&session.client, &handle.node).await {
            Ok(Some(stat))
                if stat.czxid == handle.czxid && stat.ephemeral_owner == session.id() =>
            {
                handle.renewed(sent_at);
                Ok(Ownership::Held)
            }
            Ok(_) => Ok(Ownership::NotHeld),
            Err(e) if e.code() == Some(&zk::Error::SessionExpired) => Ok(Ownership::NotHeld),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn release(&self, handle: &ZkHandle) -> Result<Ownership, LockError> {
        let outcome = match self
            .requests
            .delete_node(&handle.session.client, &handle.node)
            .await
        {
            Ok(true) => Ownership::Held,
            Ok(false) => Ownership::NotHeld,
            Err(e) if e.code() == Some(&zk::Error::SessionExpired) => Ownership::NotHeld,
            Err(e) => return Err(self.error(e)),
        };
        handle.settled.store(true, Ordering::Release);
        Ok(outcome)
    }

    fn loss_signal(&self, handle: &ZkHandle) -> Option<LossSignal> {
        let ended = handle.session.ended();
        Some(Box::pin(async move {
            ended.await;
            LossReason::SessionEnded
        }))
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}

/// Completes when the wait `until` ends; never for `WaitUntil::No`, whose single
/// attempt ends the wait itself.
pub(crate) async fn wait_ends(until: WaitUntil) {
    match until {
        WaitUntil::No => std::future::pending().await,
        other => other.reached().await,
    }
}

/// A node's `czxid` as its fencing token; the server never sends a negative
/// one, but that is its data, not ours to trust.
pub(crate) fn czxid_token(own: &OwnNode) -> Result<FencingToken, LockError> {
    u64::try_from(own.czxid)
        .map(FencingToken::new)
        .map_err(|_| {
            LockError::backend(
                "zookeeper",
                format!(
                    "the server returned a negative czxid {} for {}",
                    own.czxid, own.name
                ),
            )
        })
}

/// What a ZooKeeper lock client keeps per held lock: the session and the node.
#[derive(Debug)]
pub struct ZkHandle {
    session: Arc<Session>,
    node: String,
    czxid: i64,
    ttl: Duration,
    /// When the last acquire or renewal that proved ownership was sent.
    valid_from: Mutex<Instant>,
    /// A release reached the server: nothing is left to clean up.
    settled: AtomicBool,
}

impl ZkHandle {
    pub(crate) fn new(
        session: Arc<Session>,
        node: String,
        czxid: i64,
        ttl: Duration,
        sent_at: Instant,
    ) -> Self {
        ZkHandle {
            session,
            node,
            czxid,
            ttl,
            valid_from: Mutex::new(sent_at),
            settled: AtomicBool::new(false),
        }
    }

    /// The lock node's path (relative to the chroot).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The id of the session the node belongs to.
    pub fn session_id(&self) -> i64 {
        self.session.id()
    }

    fn renewed(&self, sent_at: Instant) {
        let mut valid_from = self
            .valid_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *valid_from = (*valid_from).max(sent_at);
    }
}

impl Drop for ZkHandle {
    /// Not an acquire's undo but the lease's ttl promise: a lease dropped without
    /// a release that reached the server (abandoned, or the release failed) would
    /// keep its node as long as the shared session lives, which may be forever,
    /// so the node is deleted when the ttl would have run out. The node's name
    /// holds our uuid, so this never touches another holder's node.
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) || self.session.state().is_terminated() {
            return;
        }
        let valid_from = *self
            .valid_from
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let expires_at = valid_from + self.ttl;
        let (session, node) = (self.session.clone(), std::mem::take(&mut self.node));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep_until(expires_at.into()).await;
                    if let Err(error) = session.client.delete(&node, None).await {
                        tracing::debug!(%node, %error, "deleting an abandoned lock node failed");
                    }
                });
            }
            // No runtime to wait on: free it now rather than never.
            Err(_) => drop(session.client.delete(&node, None)),
        }
    }
}
