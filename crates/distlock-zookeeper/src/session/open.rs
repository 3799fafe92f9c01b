//! Opening a session: `connect()`'s first one fails at once when every server
//! refuses the TCP connection (nothing listens there: a wrong port, a server
//! not deployed). Anything else (a server that accepts but does not answer yet,
//! one that is slow to accept, a name that does not resolve) and every later
//! session of a client that has connected before (a refusal then means a server
//! restarting) is retried until `connect_timeout`, as Curator does.
//!
//! Apart from the pool of sessions and the ttl checks, so that this retry
//! policy reads in one place.

use super::{Session, Sessions, millis};
use crate::error::ZkError;
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Backoff;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

/// The longest one server may take to accept or refuse the probe before it
/// counts as slow (ridden out) rather than refusing.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Pauses between session attempts while no server establishes one.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(1);

impl Sessions {
    /// Opens the session `connect` checks the server with, and keeps it for locks
    /// of the default ttl (or for all locks, when the timeout is pinned). Fails
    /// at once when every server refuses the connection.
    pub async fn open_first(&self) -> Result<Arc<Session>, ZkError> {
        let requested = self
            .settings
            .pinned
            .unwrap_or(distlock_core::AcquireOptions::DEFAULT_TTL);
        let deadline = self.connect_deadline();
        let within = PROBE_TIMEOUT.min(self.settings.connect_timeout);
        if all_refuse(&self.settings.servers, within).await {
            return Err(ZkError::Refused {
                servers: self.settings.servers.join(","),
            });
        }
        let session = match self.open(requested, deadline).await {
            Ok(session) => Arc::new(session),
            // The client only logs why a TLS session failed; find out directly.
            Err(e @ ZkError::ConnectTimedOut { .. }) => {
                let tls = self.settings.tls.as_ref();
                return Err(crate::tls::explain(tls, &self.settings.servers, e, within).await);
            }
            Err(e) => return Err(e),
        };
        self.learn(requested, &session);
        if session.timeout == requested || self.settings.pinned.is_some() {
            self.pool().insert(millis(requested), session.clone());
        }
        Ok(session)
    }

    /// When a session opened now must be established by.
    pub(super) fn connect_deadline(&self) -> Instant {
        Instant::now() + self.settings.connect_timeout
    }

    /// Opens a new session of `session_timeout`, trying again until `deadline`.
    ///
    /// The client alone gives up after the session timeout, which follows the
    /// ttl: a 1 s lease would fail after 1 s of a server restarting although
    /// `connect_timeout` allows 10 s. So each failed attempt is followed by
    /// another one until the deadline; only an answer that retrying cannot
    /// change (rejected credentials, bad arguments) ends it early. An attempt
    /// tries each server once (`with_fail_eagerly`): left to itself, the
    /// client would go round them again with pauses that double each round,
    /// 3.2 s after the sixth, where the pauses here stop at a second.
    pub(super) async fn open(
        &self,
        session_timeout: Duration,
        deadline: Instant,
    ) -> Result<Session, ZkError> {
        if let Some(client) = &self.settings.given {
            return given_session(client);
        }
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
        let mut last = None;
        loop {
            let mut connector = zk::Client::connector()
                .with_session_timeout(session_timeout)
                .with_fail_eagerly();
            if let Some(digest) = &self.settings.digest {
                connector = connector.with_auth("digest", digest.as_bytes());
            }
            let connect = crate::tls::connect(
                connector,
                &self.settings.connect_string,
                self.settings.tls.as_ref(),
            );
            match tokio::time::timeout_at(deadline, connect).await {
                Ok(Ok(client)) => {
                    let timeout = client.session_timeout();
                    return Ok(Session { client, timeout });
                }
                Ok(Err(error)) if retried(&error) => {
                    tracing::debug!(%error, "no session yet; trying again until connect_timeout");
                    last = Some(error);
                }
                Ok(Err(error)) => return Err(ZkError::Connect(error)),
                Err(_) => break,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            backoff.pause(left, WaitUntil::Forever).await;
        }
        Err(ZkError::ConnectTimedOut {
            within: self.settings.connect_timeout,
            last: last.map_or_else(String::new, |error| match error {
                // The library's word for an attempt that went round every server.
                zk::Error::NoHosts => "; last attempt: no server established a session".to_owned(),
                error => format!("; last attempt: {error}"),
            }),
        })
    }
}

/// The session of an application's own client, while it lasts: distlock
/// cannot open another from it.
fn given_session(client: &zk::Client) -> Result<Session, ZkError> {
    let session = Session {
        client: client.clone(),
        timeout: client.session_timeout(),
    };
    match session.state().is_terminated() {
        true => Err(session.ended_error(
            "on the client given to ZkConfig::from_client, which distlock cannot reopen: \
             build the lock again from a new client",
        )),
        false => Ok(session),
    }
}

/// Errors after which another session attempt may succeed: no server reached or
/// none answered in time (the client wraps socket errors as `Custom`).
fn retried(error: &zk::Error) -> bool {
    matches!(
        error,
        zk::Error::Timeout | zk::Error::ConnectionLoss | zk::Error::NoHosts | zk::Error::Custom(_)
    )
}

/// True when every server refuses a TCP connection: nothing listens there, and
/// waiting for `connect_timeout` would only delay the error. A server that
/// accepts, does not answer within `within`, or cannot be resolved may be
/// starting or slow, so it does not count as refusing.
async fn all_refuse(servers: &[String], within: Duration) -> bool {
    for server in servers {
        let probe = tokio::net::TcpStream::connect(server.as_str());
        match tokio::time::timeout(within, probe).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            _ => return false,
        }
    }
    !servers.is_empty()
}
