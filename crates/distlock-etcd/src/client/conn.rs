//! The connection every request goes through: one tonic channel balanced over
//! the endpoints, the metadata each request carries (`token`, `hasleader`), and
//! the login, done again once when etcd says the token expired.

use super::pb;
use super::{ConnectOptions, Error, Result};
use http::uri::PathAndQuery;
use prost::bytes::BufMut;
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError, RwLock};
use tokio::sync::mpsc;
use tonic::client::Grpc;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_prost::{ProstCodec, ProstDecoder};

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
    /// A channel balanced over `urls`, not yet connected nor logged in.
    pub(crate) fn new<'a>(
        urls: impl Iterator<Item = &'a str>,
        options: ConnectOptions,
    ) -> Result<Self> {
        let list = urls
            .map(|url| endpoint(url, &options))
            .collect::<Result<Vec<_>>>()?;
        if list.is_empty() {
            return Err(Error::InvalidArgs("no endpoints".into()));
        }
        Ok(Self::over(Channel::balance_list(list.into_iter()), options))
    }

    /// Requests over `channel`, with the options' leader requirement and login.
    pub(crate) fn over(channel: Channel, options: ConnectOptions) -> Self {
        Conn {
            channel,
            require_leader: options.require_leader,
            auth: Arc::new(Auth {
                user: options.user,
                token: RwLock::new(None),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        }
    }

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

    async fn send<Q, R>(&self, path: &'static str, message: &Q) -> Result<R>
    where
        Q: prost::Message,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let request = self.request(message.encode_to_vec(), path);
        let codec = Encoded(PhantomData);
        let reply = self
            .grpc()
            .await?
            .unary(request, PathAndQuery::from_static(path), codec)
            .await?;
        Ok(reply.into_inner())
    }

    /// One request and its reply, logging in again once if the token expired.
    /// The message is encoded from a borrow on each try, so neither this nor a
    /// caller that retries has to clone it (a transaction's tree of owned keys).
    pub(crate) async fn unary<Q, R>(&self, path: &'static str, message: &Q) -> Result<R>
    where
        Q: prost::Message,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.logged_in(|| self.send(path, message)).await
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
        self.logged_in(|| self.open(path, first.clone())).await
    }

    /// Runs `call`, and once more after logging in again if etcd refused the
    /// token it was sent with.
    async fn logged_in<T, F, Fut>(&self, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let sent_with = self.auth.token();
        match call().await {
            Err(Error::GRpcStatus(status)) if self.expired(&status) => {
                self.refresh_token(sent_with).await?;
                call().await
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
    pub(crate) async fn refresh_token(&self, stale: Option<AsciiMetadataValue>) -> Result<()> {
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
        let reply: pb::AuthenticateResponse = self.send(AUTHENTICATE, &login).await?;
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

/// The codec of a unary request encoded before it is handed to tonic (which
/// needs an owned message): the bytes go out as they are, the reply is decoded
/// by prost.
struct Encoded<R>(PhantomData<R>);

impl<R: prost::Message + Default + Send + 'static> Codec for Encoded<R> {
    type Encode = Vec<u8>;
    type Decode = R;
    type Encoder = AsEncoded;
    type Decoder = ProstDecoder<R>;

    fn encoder(&mut self) -> AsEncoded {
        AsEncoded
    }

    fn decoder(&mut self) -> ProstDecoder<R> {
        ProstDecoder::default()
    }
}

/// Writes an encoded message into tonic's buffer.
struct AsEncoded;

impl Encoder for AsEncoded {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut EncodeBuf<'_>,
    ) -> std::result::Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}
