//! The adapter's errors, and how they become [`LockError`]s at the boundary.

use distlock_core::LockError;
use zookeeper_client as zk;

const BACKEND: &str = "zookeeper";

/// What went wrong talking to ZooKeeper.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ZkError {
    /// A request failed with a ZooKeeper error.
    #[error("{op} `{path}` failed: {source}")]
    Request {
        op: &'static str,
        path: String,
        #[source]
        source: zk::Error,
    },
    /// A request got no answer in time.
    #[error("{op} `{path}` got no answer within {timeout:?}")]
    TimedOut {
        op: &'static str,
        path: String,
        timeout: std::time::Duration,
    },
    /// No session could be established, for a reason retrying cannot change.
    #[error("cannot open a session: {0}")]
    Connect(#[source] zk::Error),
    /// Every server refused the TCP connection: nothing listens there.
    #[error(
        "every server refused the connection ({servers}): nothing listens there; check the \
         host and port, and that ZooKeeper runs"
    )]
    Refused { servers: String },
    /// A TLS handshake with a server failed: retrying cannot help, the settings can.
    /// (Only a build with the `tls` feature can make a handshake.)
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    #[error(
        "TLS to {server} failed ({reason}); check that ca= names the CA that signed the \
         servers' certificates and that the port is their secureClientPort, and give cert= \
         and key= if they require client certificates (ssl.clientAuth=need)"
    )]
    Tls { server: String, reason: String },
    /// No session was established within `connect_timeout`.
    #[error("no session established within connect_timeout ({within:?}){last}")]
    ConnectTimedOut {
        within: std::time::Duration,
        /// `; last attempt: ...`, or empty.
        last: String,
    },
    /// The session ended (expired, closed, authentication failed) while the
    /// operation needed it.
    #[error("ZooKeeper session 0x{session:x} ended ({state}) {context}")]
    SessionEnded {
        session: i64,
        state: zk::SessionState,
        context: &'static str,
    },
    /// The session is disconnected; it may still be alive on the server.
    #[error("disconnected from ZooKeeper (session 0x{session:x} may still be alive)")]
    Disconnected { session: i64 },
}

impl ZkError {
    /// The underlying ZooKeeper error code, if any.
    pub(crate) fn code(&self) -> Option<&zk::Error> {
        match self {
            ZkError::Request { source, .. } | ZkError::Connect(source) => Some(source),
            _ => None,
        }
    }

    /// Whether the session may still be alive and a retry may succeed: the
    /// connection failed (end of stream, a socket error, which the client wraps
    /// as `Custom`, or no reply in time) or the server shed load. After such an
    /// error a create's outcome is unknown.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            ZkError::TimedOut { .. }
                | ZkError::Disconnected { .. }
                | ZkError::Request {
                    source: zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Throttled,
                    ..
                }
        )
    }

    /// Converts at the crate boundary; `endpoint` names the servers (no
    /// credentials).
    pub(crate) fn into_lock_error(self, endpoint: &str) -> LockError {
        let unavailable = |source: ZkError| LockError::Unavailable {
            backend: BACKEND,
            endpoint: endpoint.to_owned(),
            source: Box::new(source),
        };
        match self.code() {
            Some(zk::Error::NoAuth) => LockError::config(
                BACKEND,
                format!(
                    "{self}: the node's ACL does not allow this client; connect with the digest \
                     credentials (zk://user:password@...) of the principal that created the lock \
                     directories, or use another namespace"
                ),
            ),
            Some(zk::Error::AuthFailed) => LockError::config(
                BACKEND,
                format!("{self}: the server rejected the credentials; check the user and password"),
            ),
            Some(
                zk::Error::ConnectionLoss
                | zk::Error::NoHosts
                | zk::Error::Timeout
                | zk::Error::SessionExpired
                | zk::Error::SessionMoved
                | zk::Error::ClientClosed
                | zk::Error::Throttled
                | zk::Error::NotReadOnly
                // The client wraps socket errors (reset, refused) this way.
                | zk::Error::Custom(_),
            ) => unavailable(self),
            Some(_) => LockError::backend(BACKEND, self),
            None => match &self {
                ZkError::SessionEnded {
                    state: zk::SessionState::AuthFailed,
                    ..
                } => LockError::config(
                    BACKEND,
                    format!("{self}: the server rejected the credentials; check the user and password"),
                ),
                ZkError::Tls { .. } => LockError::config(BACKEND, self.to_string()),
                _ => unavailable(self),
            },
        }
    }
}
