//! etcd client errors mapped to [`LockError`]s that say what to do next.

use crate::client::Error as ClientError;
use distlock_core::LockError;
use distlock_core::toolkit::with_causes;
use std::sync::Arc;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "etcd";

/// Where the client talks to, `host:port,host:port` with credentials stripped:
/// what every error that is not the caller's fault names.
#[derive(Clone)]
pub(crate) struct Endpoints(Arc<str>);

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
    /// Whether the request may have been applied without us hearing the reply.
    pub(crate) fn is_silent(&self) -> bool {
        matches!(self, Failure::Other(LockError::Unavailable { .. }))
    }
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Endpoints {
    /// `hosts` as `host:port`, never with credentials (they go in the config's
    /// `auth`, not in the endpoints).
    pub(crate) fn new(hosts: &[String]) -> Self {
        Endpoints(Arc::from(hosts.join(",")))
    }

    /// The lock error for callers, with [`Endpoints::lease_gone`] for a vanished
    /// lease.
    pub(crate) fn lock_error(&self, failure: Failure) -> LockError {
        match failure {
            Failure::LeaseNotFound => {
                self.lease_gone("the lease this request used no longer exists on the server")
            }
            Failure::Other(e) => e,
        }
    }

    /// The server cannot be reached, for `why`.
    pub(crate) fn unavailable(&self, why: impl Into<String>) -> LockError {
        LockError::Unavailable {
            backend: BACKEND,
            endpoint: self.0.to_string(),
            source: why.into().into(),
        }
    }

    /// The TLS handshake failed: retrying cannot help, the settings can.
    fn tls_failed(&self, what: &str, message: &str) -> LockError {
        LockError::config(
            BACKEND,
            format!(
                "{what}: TLS to {} failed ({message}); check that `ca=` names the CA that \
                 signed etcd's certificate, and give `cert=` and `key=` if etcd requires \
                 client certificates (--client-cert-auth)",
                self.0
            ),
        )
    }

    /// The lease holding our key ended; `why` says how.
    pub(crate) fn lease_gone(&self, why: &str) -> LockError {
        LockError::backend(
            BACKEND,
            format!(
                "{why}: the client's etcd lease ended, so its lock keys are gone; \
                 it was out of touch with {} for longer than the ttl",
                self.0
            ),
        )
    }

    /// Converts a client error from `what` (for example "acquire transaction").
    pub(crate) fn classify(&self, what: &str, e: ClientError) -> Failure {
        let status = match e {
            ClientError::GRpcStatus(status) => status,
            ClientError::TransportError(e) => {
                let message = with_causes(&e.to_string(), std::error::Error::source(&e));
                if is_tls_failure(&message) {
                    return Failure::Other(self.tls_failed(what, &message));
                }
                return Failure::Other(self.unavailable(format!("{what}: {message}")));
            }
            ClientError::StreamEnded(_) => {
                return Failure::Other(self.unavailable(format!("{what}: {e}")));
            }
            ClientError::LeaseNotFound => return Failure::LeaseNotFound,
            ClientError::InvalidArgs(m) => {
                return Failure::Other(LockError::config(BACKEND, format!("{what}: {m}")));
            }
        };
        let message = with_causes(status.message(), std::error::Error::source(&status));
        let message = message.as_str();
        if message.contains("requested lease not found") {
            return Failure::LeaseNotFound;
        }
        let code = i32::from(status.code());
        let error = match code {
            _ if is_tls_failure(message) => self.tls_failed(what, message),
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
            // A connection that broke under the request (tonic reports it as an
            // UNKNOWN status): the server is out of reach, not refusing. With
            // mutual TLS it is also how a missing client certificate can look,
            // when the server's alert is lost with the connection.
            _ if is_transport_failure(message) => self.unavailable(format!(
                "{what}: {message} (if etcd requires client certificates, give `cert=` and `key=`)"
            )),
            _ => LockError::backend(BACKEND, format!("{what}: {message} (gRPC code {code})")),
        };
        Failure::Other(error)
    }
}

/// Whether `message` is rustls refusing a certificate or the server's TLS alert
/// (an untrusted server, a client certificate missing or refused), rather than
/// a network failure.
fn is_tls_failure(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["certificate", "fatal alert", "handshake"]
        .iter()
        .any(|word| lower.contains(word))
}

/// Whether a gRPC status `message` reports the connection failing under the
/// request rather than the server answering.
fn is_transport_failure(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "transport error",
        "connection error",
        "broken pipe",
        "connection reset",
    ]
    .iter()
    .any(|phrase| lower.contains(phrase))
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

/// The server answered something the protocol does not allow.
pub(crate) fn protocol(what: &str) -> LockError {
    LockError::backend(BACKEND, format!("unexpected reply from etcd: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_broken_under_a_request_is_unavailable() {
        let endpoints = Endpoints::new(&["127.0.0.1:2379".to_owned()]);
        let broken = tonic::Status::unknown(
            "transport error: connection error: stream closed because of a broken pipe",
        );
        let failure = endpoints.classify("lease grant", ClientError::GRpcStatus(broken));
        let error = endpoints.lock_error(failure);
        assert!(
            matches!(error, LockError::Unavailable { .. }),
            "a broken connection gave {error:?}"
        );
        let refused = tonic::Status::unknown("etcdserver: some other failure");
        let error =
            endpoints.lock_error(endpoints.classify("txn", ClientError::GRpcStatus(refused)));
        assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    }
}
