//! A small client for etcd's v3 gRPC API, only the requests distlock makes:
//! tonic for the transport, prost for hand-written messages (`pb.rs`), so
//! nothing is generated at build time and no `protoc` is needed.
//!
//! A [`Client`] balances its requests over every endpoint (a dead one is left
//! out until it reconnects), sends `hasleader: true` when asked so a member cut
//! off from the leader refuses instead of serving stale reads or silent
//! watches, and with a user and password logs in once and again whenever etcd
//! says the token expired. Its requests are those of etcd-client, the Rust
//! crate this replaces: same paths, same fields, same metadata.
//!
//! Not a stable API: it is public for this workspace's tests, benchmarks and
//! peer comparisons, which talk to etcd beside the adapter.

mod conn;
mod kv;
mod lease;
mod pb;
mod watch;

pub use kv::{CompareOp, GetOptions, KvClient, PutOptions, SortOrder, SortTarget, Txn};
pub use lease::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper, LockClient};
#[cfg(test)]
pub(crate) use pb::ResponseOp;
pub use pb::{
    Compare, DeleteRangeResponse, Event, KeyValue, LeaseGrantResponse, LeaseRevokeResponse,
    LeaseTtlResponse, LockResponse, Member, MemberListResponse, PutResponse, RangeResponse,
    ResponseHeader, StatusResponse, TxnOp, TxnOpResponse, TxnResponse, WatchResponse,
};
pub use watch::{
    WatchClient, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponseStream,
};

use conn::Conn;
use std::time::Duration;
use tonic::Status;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server (or the channel, for a connection that broke under the
    /// request) answered with this status.
    #[error("grpc request error: {0}")]
    GRpcStatus(Status),
    /// No connection could be used.
    #[error("transport error: {0}")]
    TransportError(tonic::transport::Error),
    /// The request or the settings are invalid.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// A keep-alive found the lease gone.
    #[error("lease keep-alive: lease not found")]
    LeaseNotFound,
    /// A stream ended before its first reply.
    #[error("the {0} stream ended before its first reply")]
    StreamEnded(&'static str),
}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        Error::GRpcStatus(status)
    }
}

/// A request's outcome.
pub type Result<T> = std::result::Result<T, Error>;

/// How to connect. The password and the token never appear in `Debug`.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    connect_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    require_leader: bool,
    user: Option<(String, String)>,
    #[cfg(feature = "tls")]
    tls: Option<tonic::transport::ClientTlsConfig>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.user.as_ref().map(|(name, _)| name);
        f.debug_struct("ConnectOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("keep_alive", &self.keep_alive)
            .field("require_leader", &self.require_leader)
            .field("user", &user)
            .finish_non_exhaustive()
    }
}

impl ConnectOptions {
    /// No timeouts, pings, leader requirement, login or TLS.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest wait for one connection to an endpoint.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// HTTP/2 pings every `interval` while requests are open; a ping unanswered
    /// for `timeout` closes the connection.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// Asks members to refuse requests while they have no leader.
    pub fn with_require_leader(mut self, require: bool) -> Self {
        self.require_leader = require;
        self
    }

    /// Logs in as `user`, and again whenever the token expires.
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// TLS settings for `https://` endpoints.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: tonic::transport::ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// A connection to an etcd cluster; clones share it.
#[derive(Debug, Clone)]
pub struct Client {
    conn: Conn,
}

impl Client {
    /// A client balanced over `endpoints` (`http://host:port` or
    /// `https://host:port`), logged in if the options give a user. Connections
    /// open on the first request, so only a login talks to etcd here.
    pub async fn connect<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: Option<ConnectOptions>,
    ) -> Result<Self> {
        let urls: Vec<E> = endpoints.into_iter().collect();
        let conn = Conn::new(urls.iter().map(AsRef::as_ref), options.unwrap_or_default())?;
        conn.refresh_token(None).await?;
        Ok(Client { conn })
    }

    /// A client over an application's own `channel`, with the options' leader
    /// requirement and login (its other options are the channel's business).
    pub async fn from_channel(
        channel: tonic::transport::Channel,
        options: ConnectOptions,
    ) -> Result<Self> {
        let conn = Conn::over(channel, options);
        conn.refresh_token(None).await?;
        Ok(Client { conn })
    }

    /// Reads and writes keys.
    pub fn kv_client(&self) -> KvClient {
        KvClient::new(self.conn.clone())
    }

    /// Grants, keeps alive and revokes leases.
    pub fn lease_client(&self) -> LeaseClient {
        LeaseClient::new(self.conn.clone())
    }

    /// Opens watch streams.
    pub fn watch_client(&self) -> WatchClient {
        WatchClient::new(self.conn.clone())
    }

    /// etcd's own lock service (`v3lockpb.Lock`).
    pub fn lock_client(&self) -> LockClient {
        LockClient::new(self.conn.clone())
    }

    /// The cluster's members.
    pub async fn member_list(&self) -> Result<MemberListResponse> {
        let path = "/etcdserverpb.Cluster/MemberList";
        self.conn.unary(path, &pb::Empty {}).await
    }

    /// The status of the member that answers.
    pub async fn status(&self) -> Result<StatusResponse> {
        let path = "/etcdserverpb.Maintenance/Status";
        self.conn.unary(path, &pb::Empty {}).await
    }
}

impl MemberListResponse {
    /// The members.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
}

impl Member {
    /// The URLs it serves clients on.
    pub fn client_urls(&self) -> &[String] {
        &self.client_urls
    }
}

impl StatusResponse {
    /// The member's etcd version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The bytes of the member's database in use (`dbSizeInUse`).
    pub fn db_size_in_use(&self) -> i64 {
        self.db_size_in_use
    }
}
