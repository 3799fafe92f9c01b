//! Turning etcd client errors into [`LockError`]s that say what to do next.

use distlock_core::LockError;
use etcd_client::{Error as ClientError, KvClient, Txn, TxnResponse};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First pause before retrying a request that could not reach a member.
const RETRY_PAUSE: Duration = Duration::from_millis(10);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(250);

/// The backend name in errors.
pub(crate) const BACKEND: &str = "etcd";

/// What every error needs to name: where the client talks to (never with
/// credentials) and how long a request may take.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// `host:port,host:port`, credentials stripped.
    pub endpoints: Arc<str>,
    /// Longest wait for one reply.
    pub request_timeout: Duration,
}

/// Why a request failed, classified for the adapter's own decisions before it
/// becomes a [`LockError`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// The lease the request used no longer exists on the server.
    LeaseNotFound,
    /// Anything else, already explained.
    Other(LockError),
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        Failure::Other(e)
    }
}

impl Failure {
    /// The lock error for callers, with `lease_gone` for a vanished lease.
    pub(crate) fn into_lock_error(self, ctx: &Context) -> LockError {
        match self {
            Failure::LeaseNotFound => lease_gone(
                ctx,
                "the lease this request used no longer exists on the server",
            ),
            Failure::Other(e) => e,
        }
    }
}

impl Context {
    /// Runs a request that is safe to repeat, retrying failures to reach a member
    /// (the balancer picked a dead one, an election is on) until the request
    /// timeout. Every request of the lock protocol is safe to repeat: the
    /// put-if-absent adopts a key an earlier attempt put, and deletes compare the
    /// create revision.
    pub(crate) async fn retrying<T, F, Fut>(&self, what: &str, mut request: F) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let deadline = Instant::now() + self.request_timeout;
        let mut pause = RETRY_PAUSE;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let failure = match tokio::time::timeout(remaining, request()).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) => self.classify(what, e),
                Err(_) => return Err(Failure::Other(self.timed_out(what))),
            };
            let unreachable = matches!(failure, Failure::Other(LockError::Unavailable { .. }));
            if !unreachable || Instant::now() + pause >= deadline {
                return Err(failure);
            }
            tracing::debug!(what, "etcd request failed to reach a member; retrying");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
        }
    }

    /// Runs a transaction, retrying as [`Context::retrying`] does.
    pub(crate) async fn txn(
        &self,
        kv: &KvClient,
        what: &str,
        txn: Txn,
    ) -> Result<TxnResponse, Failure> {
        self.retrying(what, || {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Runs one request (opening a stream) with the request timeout.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.request_timeout, request).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.classify(what, e)),
            Err(_) => Err(Failure::Other(self.timed_out(what))),
        }
    }

    /// No reply to `what` within the request timeout.
    pub(crate) fn timed_out(&self, what: &str) -> LockError {
        self.unavailable(format!(
            "no reply to {what} within {:?} (the request timeout)",
            self.request_timeout
        ))
    }

    /// The server cannot be reached, for `why`.
    pub(crate) fn unavailable(&self, why: impl Into<String>) -> LockError {
        LockError::Unavailable {
            backend: BACKEND,
            endpoint: self.endpoints.to_string(),
            source: why.into().into(),
        }
    }

    /// Converts a client error from `what` (for example "acquire transaction").
    pub(crate) fn classify(&self, what: &str, e: ClientError) -> Failure {
        let status = match e {
            ClientError::GRpcStatus(status) => status,
            ClientError::TransportError(e) => {
                return Failure::Other(self.unavailable(format!(
                    "{what}: {}",
                    with_causes(&e.to_string(), std::error::Error::source(&e))
                )));
            }
            ClientError::IoError(e) => {
                return Failure::Other(self.unavailable(format!("{what}: {e}")));
            }
            ClientError::LeaseKeepAliveError(m) if m.contains("not found") => {
                return Failure::LeaseNotFound;
            }
            ClientError::InvalidArgs(m) | ClientError::EndpointError(m) => {
                return Failure::Other(LockError::config(BACKEND, format!("{what}: {m}")));
            }
            other => {
                return Failure::Other(LockError::backend(BACKEND, format!("{what}: {other}")));
            }
        };
        let message = with_causes(status.message(), std::error::Error::source(&status));
        let message = message.as_str();
        if message.contains("requested lease not found") {
            return Failure::LeaseNotFound;
        }
        let code = i32::from(status.code());
        let error = match code {
            grpc::CANCELLED | grpc::DEADLINE_EXCEEDED | grpc::ABORTED | grpc::UNAVAILABLE => {
                self.unavailable(format!("{what}: {message}"))
            }
            _ if message.contains("authentication failed") => LockError::config(
                BACKEND,
                format!(
                    "{what}: etcd refused the credentials ({message}); check the user name and password"
                ),
            ),
            _ if message.contains("user name is empty")
                || message.contains("invalid auth token") =>
            {
                LockError::config(
                    BACKEND,
                    format!(
                        "{what}: etcd requires authentication ({message}); give a user and password \
                     (etcd://user:password@host or EtcdConfig::auth)"
                    ),
                )
            }
            grpc::PERMISSION_DENIED | grpc::UNAUTHENTICATED => LockError::config(
                BACKEND,
                format!(
                    "{what}: permission denied ({message}); grant the user read-write on the \
                     namespace's key range"
                ),
            ),
            _ => LockError::backend(BACKEND, format!("{what}: {message} (gRPC code {code})")),
        };
        Failure::Other(error)
    }
}

/// `message`, followed by each cause in turn (a transport error's own text hides
/// why it failed: refused, reset, no route).
fn with_causes(message: &str, mut cause: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = message.to_owned();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

/// gRPC status codes (the numbers are fixed by the gRPC spec).
mod grpc {
    pub const CANCELLED: i32 = 1;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const ABORTED: i32 = 10;
    pub const UNAVAILABLE: i32 = 14;
    pub const UNAUTHENTICATED: i32 = 16;
}

/// The lease holding our key ended; `why` says how.
pub(crate) fn lease_gone(ctx: &Context, why: &str) -> LockError {
    LockError::backend(
        BACKEND,
        format!(
            "{why}: the client's etcd lease ended, so its lock keys are gone; \
             it was out of touch with {} for longer than the ttl",
            ctx.endpoints
        ),
    )
}

/// The server answered something the protocol does not allow.
pub(crate) fn protocol(what: &str) -> LockError {
    LockError::backend(BACKEND, format!("unexpected reply from etcd: {what}"))
}
