//! Running one etcd request: the request timeout, and retries of requests that
//! could not reach a member.

use crate::client::{Error as ClientError, KvClient, Txn, TxnResponse};
use crate::error::{Endpoints, Failure};
use distlock_core::LockError;
use distlock_core::toolkit::Backoff;
use std::time::{Duration, Instant};

/// First pause before retrying a request that could not reach a member.
const RETRY_PAUSE: Duration = Duration::from_millis(10);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(250);

/// Runs requests against one client's endpoints; clones share nothing mutable.
#[derive(Debug, Clone)]
pub(crate) struct Rpc {
    /// What errors name.
    pub endpoints: Endpoints,
    /// Longest wait for one reply.
    pub timeout: Duration,
}

impl Rpc {
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
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Backoff::new(RETRY_PAUSE, RETRY_PAUSE_MAX);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let failure = match tokio::time::timeout(remaining, request()).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) => self.endpoints.classify(what, e),
                Err(_) => return Err(Failure::Other(self.timed_out(what))),
            };
            let pause = backoff.next_delay();
            if !failure.is_silent() || Instant::now() + pause >= deadline {
                return Err(failure);
            }
            tracing::debug!(what, "etcd request failed to reach a member; retrying");
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs a transaction, retrying as [`Rpc::retrying`] does (each try encodes
    /// the same `txn`: nothing is cloned).
    pub(crate) async fn txn(
        &self,
        kv: &KvClient,
        what: &str,
        txn: Txn,
    ) -> Result<TxnResponse, Failure> {
        self.retrying(what, || kv.txn(&txn)).await
    }

    /// Runs one request (opening a stream) with the request timeout, once.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.endpoints.classify(what, e)),
            Err(_) => Err(Failure::Other(self.timed_out(what))),
        }
    }

    /// No reply to `what` within the request timeout.
    pub(crate) fn timed_out(&self, what: &str) -> LockError {
        self.endpoints.unavailable(format!(
            "no reply to {what} within {:?} (the request timeout)",
            self.timeout
        ))
    }
}
