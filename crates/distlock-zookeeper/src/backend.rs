//! The adapter: connecting, and acquire, renew, release and loss as core asks for
//! them. The queue recipe behind acquire is in `queue.rs`.

use crate::config::{AclPolicy, ZkConfig};
use crate::error::ZkError;
use crate::layout;
use crate::node::{NodeState, QueuedNode, ZkHandle};
use crate::session::Sessions;
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, LossSignal, Ownership, WaitUntil};
use distlock_core::{
    Capabilities, FencingGuarantee, FencingToken, LockError, LossReason, TokenDurability, Wake,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zookeeper_client::{self as zk, Acl, AuthId, Permission};

/// The smallest ttl reported while the server's minimum session timeout is not
/// known yet; acquires below the real minimum still fail with a clear error.
const UNKNOWN_MIN_TTL: Duration = Duration::from_millis(1);

/// The ZooKeeper adapter. Use it through [`crate::ZkLock`].
#[derive(Debug)]
pub struct ZkBackend {
    sessions: Sessions,
    namespace: String,
    pub(crate) acls: Vec<Acl>,
    endpoint: String,
    request_timeout: Duration,
    requests: AtomicU64,
}

impl ZkBackend {
    /// Validates `config`, opens a first session, which checks that the servers
    /// answer, the credentials are accepted and the chroot exists, and learns the
    /// server's session timeout range.
    pub async fn connect(config: ZkConfig) -> Result<Self, LockError> {
        config.validate()?;
        let backend = ZkBackend {
            acls: acls_for(config.acl_policy()),
            namespace: config.namespace.clone(),
            request_timeout: config.request_timeout,
            requests: AtomicU64::new(0),
            sessions: Sessions::new(&config),
            endpoint: config.display_endpoint(),
        };
        let first = backend
            .sessions
            .open_first()
            .await
            .map_err(|e| backend.error(e))?;
        let root = backend
            .call("exists", "/", first.client.check_stat("/"))
            .await;
        match root {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(LockError::config(
                    "zookeeper",
                    format!(
                        "chroot `{}` does not exist on {}; create it (zkCli.sh create {0}) or fix the URL path",
                        config.chroot.as_deref().unwrap_or("/"),
                        backend.endpoint
                    ),
                ));
            }
            Err(e) => return Err(backend.error(e)),
        }
        // After the session, not before: a server that is still starting answers
        // four-letter words with "not currently serving requests".
        backend.sessions.probe_limits(&config.endpoints).await;
        backend.requests.store(0, Ordering::Relaxed);
        Ok(backend)
    }

    /// How many requests this client has sent (create, list, watch, exists,
    /// delete), for measuring round trips per operation.
    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The lock directory of `name`: `/{namespace}/{escaped name}`.
    pub fn lock_dir(&self, name: &str) -> String {
        layout::lock_dir(&self.namespace, name)
    }

    pub(crate) fn error(&self, e: ZkError) -> LockError {
        e.into_lock_error(&self.endpoint)
    }

    /// Sends one request and waits for its reply, at most `request_timeout`.
    pub(crate) async fn call<T>(
        &self,
        op: &'static str,
        path: &str,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, ZkError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.request_timeout, request).await {
            Ok(reply) => reply.map_err(|source| ZkError::Request {
                op,
                path: path.to_owned(),
                source,
            }),
            Err(_) => Err(ZkError::TimedOut {
                op,
                path: path.to_owned(),
                timeout: self.request_timeout,
            }),
        }
    }
}

/// The ACL list for a policy.
fn acls_for(policy: AclPolicy) -> Vec<Acl> {
    let creator = Acl::new(Permission::ALL, AuthId::authed());
    let world = |permission| Acl::new(permission, AuthId::anyone());
    match policy {
        AclPolicy::Open => vec![world(Permission::ALL)],
        AclPolicy::Creator => vec![creator, world(Permission::READ)],
        AclPolicy::CreatorOnly => vec![creator],
    }
}

#[async_trait]
impl Backend for ZkBackend {
    type Handle = ZkHandle;

    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fencing: FencingGuarantee::Strict,
            fifo: true,
            wake: Wake::Push,
            session_bound: true,
            token_durability: TokenDurability::Persisted,
            min_ttl: self.sessions.min_timeout().unwrap_or(UNKNOWN_MIN_TTL),
            ttl_granularity: Duration::from_millis(1),
        }
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<ZkHandle>, LockError> {
        let wait_ends = async {
            match req.wait {
                WaitUntil::NoWait => std::future::pending().await,
                other => other.reached().await,
            }
        };
        tokio::pin!(wait_ends);
        let session = tokio::select! {
            session = self.sessions.for_ttl(req.ttl, &self.endpoint) => session?,
            _ = &mut wait_ends => return Err(req.not_acquired()),
        };
        let mut node = QueuedNode::new(session, self.lock_dir(req.key.as_str()));
        let outcome = tokio::select! {
            outcome = self.queue_and_wait(&mut node, &req) => outcome?,
            _ = &mut wait_ends => None,
        };
        let (Some(sent_at), NodeState::Created { czxid, .. }) = (outcome, node.state.clone())
        else {
            node.withdraw().await;
            return Err(req.not_acquired());
        };
        let handle = node
            .into_handle(req.ttl, sent_at)
            .ok_or_else(|| req.not_acquired())?;
        let token = u64::try_from(czxid).map_err(|_| {
            LockError::backend(
                "zookeeper",
                format!(
                    "the server returned a negative czxid {czxid} for {}",
                    handle.node
                ),
            )
        })?;
        Ok(Acquired {
            handle,
            token: FencingToken::new(token),
            sent_at,
        })
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
        match self
            .call(
                "exists",
                &handle.node,
                session.client.check_stat(&handle.node),
            )
            .await
        {
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
        let session = &handle.session;
        let outcome = match self
            .call(
                "delete",
                &handle.node,
                session.client.delete(&handle.node, None),
            )
            .await
        {
            Ok(()) => Ownership::Held,
            Err(e)
                if matches!(
                    e.code(),
                    Some(zk::Error::NoNode | zk::Error::SessionExpired)
                ) =>
            {
                Ownership::NotHeld
            }
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
}
