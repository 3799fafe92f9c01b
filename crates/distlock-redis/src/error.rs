//! The crate's one error type: what went wrong with one command to one server,
//! converted into [`LockError`] at the boundary with the backend name and the
//! (credential-free) endpoint.

use distlock_core::LockError;
use redis::{ErrorKind, ServerErrorKind};
use std::time::Duration;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "redis";

/// What went wrong with one command to one Redis server.
#[derive(Debug)]
pub(crate) enum CommandError {
    /// No reply within the budget; the connection was replaced.
    Timeout(Duration),
    /// The `redis` crate or the server reported an error.
    Redis(redis::RedisError),
    /// The server answered something the protocol does not allow.
    Reply(String),
    /// Sentinel named no usable primary (all unreachable, an unknown name, a
    /// failover under way).
    Sentinel(String),
    /// A fenced write was applied, but fewer replicas than asked acknowledged it.
    TooFewReplicas {
        acked: u32,
        ack: crate::replicas::ReplicaAck,
    },
}

impl From<redis::RedisError> for CommandError {
    fn from(e: redis::RedisError) -> Self {
        CommandError::Redis(e)
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Timeout(after) => write!(f, "no reply within {after:?}"),
            CommandError::Redis(e) => write!(f, "{e}"),
            CommandError::Reply(what) => write!(f, "unexpected reply: {what}"),
            CommandError::Sentinel(why) => write!(f, "{why}"),
            CommandError::TooFewReplicas { acked, ack } => write!(
                f,
                "only {acked} of {} replicas acknowledged within {:?}",
                ack.replicas, ack.timeout
            ),
        }
    }
}

impl CommandError {
    /// True when the server may not have seen the request, or its reply was lost:
    /// a write may have happened.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            CommandError::Timeout(_) => true,
            CommandError::Redis(e) => e.is_io_error() || e.is_unrecoverable_error(),
            CommandError::Reply(_)
            | CommandError::Sentinel(_)
            | CommandError::TooFewReplicas { .. } => false,
        }
    }

    /// True when the server refused the command itself: an ACL (`NOPERM`), or
    /// a command it does not know (`ZMSCORE` before Redis 6.2). Trying again
    /// will not help.
    pub fn refused(&self) -> bool {
        let CommandError::Redis(e) = self else {
            return false;
        };
        match e.kind() {
            ErrorKind::Server(ServerErrorKind::NoPerm) => true,
            ErrorKind::Server(ServerErrorKind::ResponseError) => {
                e.detail().is_some_and(|d| d.starts_with("unknown command"))
            }
            _ => false,
        }
    }

    /// True when the connection should be dropped and made again: after a timeout
    /// the `redis` crate keeps the request's slot in its pipeline, so a reply that
    /// never comes would shift every later reply onto the wrong request.
    pub fn poisons_connection(&self) -> bool {
        match self {
            CommandError::Timeout(_) | CommandError::Reply(_) => true,
            CommandError::Sentinel(_) | CommandError::TooFewReplicas { .. } => false,
            // A primary demoted by a failover: the next connection asks Sentinel.
            CommandError::Redis(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) => {
                true
            }
            CommandError::Redis(e) => e.is_io_error() || e.is_unrecoverable_error(),
        }
    }

    /// The error as users see it.
    pub fn into_lock_error(self, backend: &'static str, endpoint: &str) -> LockError {
        let unavailable = |source: String| LockError::Unavailable {
            backend,
            endpoint: endpoint.to_owned(),
            source: source.into(),
        };
        let e = match self {
            CommandError::Timeout(after) => {
                return unavailable(format!(
                    "no reply within {after:?} (raise the `timeout` URL parameter if the server is merely slow)"
                ));
            }
            CommandError::Reply(what) => {
                return LockError::backend(
                    backend,
                    format!(
                        "unexpected reply from {endpoint}: {what}; is this a Redis server (or a compatible one with Lua scripting)?"
                    ),
                );
            }
            // Every Sentinel refused our TLS: the settings, not the network.
            CommandError::Sentinel(why)
                if endpoint.starts_with("rediss+") && is_tls_failure(&why) =>
            {
                return tls_refused(backend, endpoint, &why);
            }
            CommandError::Sentinel(why) => return unavailable(why),
            CommandError::TooFewReplicas { acked, ack } => {
                return LockError::backend(
                    backend,
                    format!(
                        "the write was applied on {endpoint}, but only {acked} of {} replicas \
                         acknowledged it within {:?}, so a failover now may lose it; check \
                         replication (INFO replication) or lower wait_replicas",
                        ack.replicas, ack.timeout
                    ),
                );
            }
            CommandError::Redis(e) => e,
        };
        let text = e.to_string();
        let upper = text.to_ascii_uppercase();
        match e.kind() {
            ErrorKind::AuthenticationFailed => LockError::config(
                backend,
                format!(
                    "authentication to {endpoint} failed ({text}); check the user and password in the URL"
                ),
            ),
            _ if upper.contains("WRONGPASS") || upper.contains("NOAUTH") => LockError::config(
                backend,
                format!(
                    "authentication to {endpoint} failed ({text}); check the user and password in the URL"
                ),
            ),
            _ if upper.contains("DB INDEX") => LockError::config(
                backend,
                format!(
                    "{endpoint} has no such database ({text}); the database number after the \
                     host must be below the server's `databases` setting (16 by default: /0 to /15)"
                ),
            ),
            ErrorKind::InvalidClientConfig => {
                LockError::config(backend, format!("{endpoint}: {text}"))
            }
            ErrorKind::Server(ServerErrorKind::NoPerm) => LockError::backend(
                backend,
                format!(
                    "{endpoint} refused a lock command ({text}); the user needs EVALSHA, EVAL and \
                     SCRIPT LOAD (ACL category @scripting), SUBSCRIBE and WAIT, and access to the \
                     lock keys and channels"
                ),
            ),
            ErrorKind::Server(ServerErrorKind::ReadOnly) => LockError::backend(
                backend,
                format!("{endpoint} is a read-only replica ({text}); point the URL at the primary"),
            ),
            ErrorKind::Server(ServerErrorKind::BusyLoading) => unavailable(format!(
                "the server is loading its dataset ({text}); retry shortly"
            )),
            // What the cluster client returns once its own retries are spent:
            // the slot's primary is unreachable or the slot is changing hands.
            ErrorKind::Server(
                ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown,
            ) => unavailable(format!(
                "the cluster could not serve the lock's slot ({text}): its primary is \
                 unreachable or the slot is moving; retry shortly"
            )),
            _ if upper.contains("UNKNOWN COMMAND")
                || upper.contains("SCRIPT") && upper.contains("DISABLED") =>
            {
                LockError::backend(
                    backend,
                    format!(
                        "{endpoint} does not run Lua scripts ({text}); distlock needs EVALSHA, EVAL \
                         and SCRIPT LOAD, so connect to Redis directly rather than through a proxy \
                         without scripting"
                    ),
                )
            }
            _ if (e.is_io_error() || e.is_unrecoverable_error())
                && endpoint.starts_with("rediss")
                && is_tls_failure(&text) =>
            {
                tls_refused(backend, endpoint, &text)
            }
            _ if e.is_io_error() || e.is_unrecoverable_error() => unavailable(text),
            _ => LockError::backend(backend, format!("{endpoint}: {text}")),
        }
    }
}

/// A TLS handshake that failed on our settings (`rediss://`, and the
/// `+sentinel` and `+cluster` forms).
fn tls_refused(backend: &'static str, endpoint: &str, text: &str) -> LockError {
    LockError::config(
        backend,
        format!(
            "TLS to {endpoint} failed ({text}); check that `ca=` names the CA that signed the \
             server's certificate, and give `cert=` and `key=` if the server requires client \
             certificates"
        ),
    )
}

/// Whether `text`, an I/O error on a `rediss://` connection, is a failed TLS
/// handshake (an untrusted or mismatched certificate, a client certificate the
/// server wanted) rather than a network failure: rustls words those as
/// certificate errors or alerts. Retrying cannot fix them; the settings can.
fn is_tls_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["certificate", "alert", "handshake", "tls"]
        .iter()
        .any(|word| lower.contains(word))
}
