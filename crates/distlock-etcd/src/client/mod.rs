//! A small client for etcd's v3 gRPC API, only the requests distlock makes:
//! tonic for the transport, prost for hand-written messages ([`pb`]'s), so
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

mod kv;
mod lease;
mod pb;
mod watch;

pub use kv::{CompareOp, GetOptions, KvClient, PutOptions, SortOrder, SortTarget, Txn};
pub use lease::{LeaseClient, LeaseKeepAliveStream, LeaseKeeper, LockClient};
pub use pb::{
    Compare, DeleteRangeResponse, Event, KeyValue, LeaseGrantResponse, LeaseRevokeResponse,
    LeaseTtlResponse, LockResponse, Member, MemberListResponse, PutResponse, RangeResponse,
    ResponseHeader, StatusResponse, TxnOp, TxnOpResponse, TxnResponse, WatchResponse,
};
pub use watch::{
    WatchClient, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponseStream,
};

use http::uri::PathAndQuery;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::client::Grpc;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_prost::ProstCodec;

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
        let options = options.unwrap_or_default();
        let mut list = Vec::new();
        for url in endpoints {
            list.push(endpoint(url.as_ref(), &options)?);
        }
        if list.is_empty() {
            return Err(Error::InvalidArgs("no endpoints".into()));
        }
        let conn = Conn {
            channel: Channel::balance_list(list.into_iter()),
            require_leader: options.require_leader,
            auth: Arc::new(Auth {
                user: options.user,
                token: RwLock::new(None),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        };
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
        self.conn.unary(path, pb::Empty {}).await
    }

    /// The status of the member that answers.
    pub async fn status(&self) -> Result<StatusResponse> {
        let path = "/etcdserverpb.Maintenance/Status";
        self.conn.unary(path, pb::Empty {}).await
    }
}

fn endpoint(url: &str, options: &ConnectOptions) -> Result<Endpoint> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| Error::InvalidArgs(format!("endpoint `{url}`: {e}")))?;
    if let Some(timeout) = options.connect_timeout {
        endpoint = endpoint.connect_timeout(timeout);
    }
    if let Some((interval, timeout)) = options.keep_alive {
        endpoint = endpoint
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(false);
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &options.tls {
        endpoint = endpoint
            .tls_config(tls.clone())
            .map_err(Error::TransportError)?;
    }
    Ok(endpoint)
}

/// The login and its token, shared by every clone of a client.
struct Auth {
    user: Option<(String, String)>,
    token: RwLock<Option<AsciiMetadataValue>>,
    /// Held while logging in, so that requests refused together log in once.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.user.as_ref().map(|(name, _)| name);
        f.debug_struct("Auth")
            .field("user", &user)
            .finish_non_exhaustive()
    }
}

impl Auth {
    fn token(&self) -> Option<AsciiMetadataValue> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The channel and the metadata every request carries.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    channel: Channel,
    require_leader: bool,
    auth: Arc<Auth>,
}

const AUTHENTICATE: &str = "/etcdserverpb.Auth/Authenticate";

impl Conn {
    fn request<T>(&self, message: T, path: &str) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let metadata = request.metadata_mut();
        if path != AUTHENTICATE
            && let Some(token) = self.auth.token()
        {
            metadata.insert("token", token);
        }
        if self.require_leader {
            metadata.insert("hasleader", MetadataValue::from_static("true"));
        }
        request
    }

    async fn grpc(&self) -> Result<Grpc<Channel>> {
        let mut grpc = Grpc::new(self.channel.clone());
        grpc.ready().await.map_err(Error::TransportError)?;
        Ok(grpc)
    }

    async fn send<Q, R>(&self, path: &'static str, message: Q) -> Result<R>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let request = self.request(message, path);
        let reply = self
            .grpc()
            .await?
            .unary(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::default(),
            )
            .await?;
        Ok(reply.into_inner())
    }

    /// One request and its reply, logging in again once if the token expired.
    pub(crate) async fn unary<Q, R>(&self, path: &'static str, message: Q) -> Result<R>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let sent_with = self.auth.token();
        match self.send(path, message.clone()).await {
            Err(Error::GRpcStatus(status)) if self.expired(&status) => {
                self.refresh_token(sent_with).await?;
                self.send(path, message).await
            }
            reply => reply,
        }
    }

    async fn open<Q, R>(
        &self,
        path: &'static str,
        first: Q,
    ) -> Result<(mpsc::Sender<Q>, Streaming<R>)>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let (sender, receiver) = mpsc::channel(100);
        // The receiver is alive and the buffer empty: this cannot fail.
        let _ = sender.try_send(first);
        let requests = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let request = self.request(requests, path);
        let replies = self
            .grpc()
            .await?
            .streaming(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::default(),
            )
            .await?;
        Ok((sender, replies.into_inner()))
    }

    /// A bidirectional stream opened with `first`, logging in again once if the
    /// token expired.
    pub(crate) async fn stream<Q, R>(
        &self,
        path: &'static str,
        first: Q,
    ) -> Result<(mpsc::Sender<Q>, Streaming<R>)>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let sent_with = self.auth.token();
        match self.open(path, first.clone()).await {
            Err(Error::GRpcStatus(status)) if self.expired(&status) => {
                self.refresh_token(sent_with).await?;
                self.open(path, first).await
            }
            reply => reply,
        }
    }

    /// Whether etcd refused a logged-in client's token (it expired, or the
    /// member restarted). The lock service loses the code and keeps the message.
    fn expired(&self, status: &Status) -> bool {
        self.auth.user.is_some()
            && match status.code() {
                Code::Unauthenticated => true,
                Code::Unknown => status.message() == "etcdserver: invalid auth token",
                _ => false,
            }
    }

    /// Logs in, unless another request did since `stale` was the token.
    async fn refresh_token(&self, stale: Option<AsciiMetadataValue>) -> Result<()> {
        let Some((name, password)) = &self.auth.user else {
            return Ok(());
        };
        let _refreshing = self.auth.refreshing.lock().await;
        if self.auth.token() != stale {
            return Ok(());
        }
        let login = pb::AuthenticateRequest {
            name: name.clone(),
            password: password.clone(),
        };
        let reply: pb::AuthenticateResponse = self.send(AUTHENTICATE, login).await?;
        let token = AsciiMetadataValue::try_from(reply.token)
            .map_err(|_| Error::InvalidArgs("etcd sent an auth token that is not ASCII".into()))?;
        *self
            .auth
            .token
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(token);
        Ok(())
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
}
