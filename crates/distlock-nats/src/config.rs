//! Configuration from a struct or a `nats://` URL, and connecting.

use crate::backend::{NatsBackend, NatsLock};
use crate::error::{BACKEND, Servers};
use crate::keys::{DEFAULT_BUCKET, bucket_problem};
use crate::protocol;
use crate::shares::rwlock::NatsRwLockBackend;
use crate::shares::semaphore::NatsSemaphoreBackend;
use async_nats::ConnectOptions;
use distlock_core::adapter::BackendLock;
use distlock_core::toolkit::{DEFAULT_STATE_TTL, Host, LockUrl, Timeouts, check_state_ttl};
use distlock_core::{AcquireOptions, LockError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const DEFAULT_PORT: u16 = 4222;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the client proves who it is. Every secret is hidden in `Debug`.
#[derive(Clone, Default)]
enum Credentials {
    #[default]
    None,
    UserPassword(String, String),
    Token(String),
    /// A file holding an nkey seed.
    NkeyFile(PathBuf),
    /// A `.creds` file (user JWT and nkey seed).
    CredsFile(PathBuf),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::UserPassword(user, _) => write!(f, "User({user:?}, <redacted>)"),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::NkeyFile(path) => write!(f, "NkeyFile({path:?})"),
            Credentials::CredsFile(path) => write!(f, "CredsFile({path:?})"),
        }
    }
}

/// TLS files, as paths the client reads at connect.
#[derive(Debug, Clone, Default)]
struct Tls {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Settings of a NATS lock client: servers, bucket, credentials, TLS, timeouts
/// and acquire defaults.
///
/// ```
/// use distlock_nats::NatsConfig;
/// let config = NatsConfig::from_url("nats://u:secret@h1:4222,h2/orders?timeout=2s").unwrap();
/// assert_eq!(config.bucket_name(), "orders");
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Debug, Clone)]
pub struct NatsConfig {
    servers: Vec<String>,
    bucket: String,
    credentials: Credentials,
    tls: Option<Tls>,
    timeouts: Timeouts,
    defaults: AcquireOptions,
    state_ttl: Duration,
    replicas: usize,
}

fn config_error(reason: impl Into<String>) -> LockError {
    LockError::config(BACKEND, reason)
}

impl NatsConfig {
    /// A config for these servers (`host[:port]`, port 4222 by default) and the
    /// default bucket, [`DEFAULT_BUCKET`].
    pub fn new<S: Into<String>>(servers: impl IntoIterator<Item = S>) -> Self {
        NatsConfig {
            servers: servers.into_iter().map(Into::into).collect(),
            bucket: DEFAULT_BUCKET.to_owned(),
            credentials: Credentials::None,
            tls: None,
            timeouts: Timeouts::new(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT),
            defaults: AcquireOptions::new(),
            state_ttl: DEFAULT_STATE_TTL,
            replicas: 1,
        }
    }

    /// How many servers of a JetStream cluster keep the bucket when this
    /// client creates it (1 to 5, else connecting fails); a bucket that exists
    /// is used as it is.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// The KV bucket the locks live in: the namespace. One bucket per namespace,
    /// so that every token of a name comes from one stream.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = bucket.into();
        self
    }

    /// How many servers keep the bucket when it is created.
    pub(crate) fn replica_count(&self) -> usize {
        self.replicas
    }

    /// The bucket this config uses.
    pub fn bucket_name(&self) -> &str {
        &self.bucket
    }

    /// Log in with a user name and password.
    pub fn user_password(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Credentials::UserPassword(user.into(), password.into());
        self
    }

    /// Log in with a token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.credentials = Credentials::Token(token.into());
        self
    }

    /// Log in with the nkey seed in this file.
    pub fn nkey_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = Credentials::NkeyFile(path.into());
        self
    }

    /// Log in with this `.creds` file (user JWT and nkey seed).
    pub fn creds_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = Credentials::CredsFile(path.into());
        self
    }

    /// Require TLS, verifying the server with the CA in `ca` (PEM) when given,
    /// else with the system's roots.
    pub fn tls(mut self, ca: Option<PathBuf>) -> Self {
        self.tls.get_or_insert_with(Tls::default).ca = ca;
        self
    }

    /// Present this client certificate and key (PEM files); implies TLS.
    pub fn client_certificate(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let tls = self.tls.get_or_insert_with(Tls::default);
        tls.cert = Some(cert.into());
        tls.key = Some(key.into());
        self
    }

    /// The connect timeout and the longest wait for one reply.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Acquire defaults for options a caller leaves unset.
    pub fn defaults(mut self, defaults: AcquireOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// How long a record may outlive its lease before an acquire's bounded
    /// sweep collects it: a crashed holder's record, unrenewed for its ttl plus
    /// this (default 24 h, at least 2 s).
    pub fn state_ttl(mut self, state_ttl: Duration) -> Self {
        self.state_ttl = state_ttl;
        self
    }

    /// Reads `nats://[user:password@]host[:port][,host[:port]…][/BUCKET][?…]`
    /// (`tls://` or `nats+tls://` for TLS), with the common parameters and
    /// `state_ttl`, `token`, `nkey` (seed file), `creds` (creds file), `ca`,
    /// `cert`, `key`.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let mut url = LockUrl::parse(BACKEND, url)?;
        let tls = match url.scheme() {
            "nats" => false,
            "tls" | "nats+tls" => true,
            other => {
                return Err(url.error(format_args!(
                    "scheme `{other}` is none of nats, tls, nats+tls"
                )));
            }
        };
        if url.hosts().is_empty() {
            return Err(url.error("no servers; write nats://host[:port][,host[:port]…]"));
        }
        let mut config = NatsConfig::new(url.hosts().iter().map(ToString::to_string));
        let parameter = url.string("namespace");
        config.bucket = match (url.path(), parameter) {
            (Some(_), Some(_)) => {
                return Err(url.error(
                    "the bucket is given twice, as the path and as `namespace=`; keep one",
                ));
            }
            (path, parameter) => path
                .or(parameter.as_deref())
                .map_or_else(|| DEFAULT_BUCKET.to_owned(), str::to_owned),
        };
        let token = url.string("token");
        let nkey = url.string("nkey");
        let creds = url.string("creds");
        config.credentials = match (url.user(), url.password(), token, nkey, creds) {
            (None, None, None, None, None) => Credentials::None,
            (Some(user), Some(password), None, None, None) => {
                Credentials::UserPassword(user.to_owned(), password.to_owned())
            }
            (None, None, Some(token), None, None) => Credentials::Token(token),
            (None, None, None, Some(path), None) => Credentials::NkeyFile(path.into()),
            (None, None, None, None, Some(path)) => Credentials::CredsFile(path.into()),
            (Some(_), None, None, None, None) => {
                return Err(url.error(
                    "a user needs a password (user:password@); for a token write `token=`",
                ));
            }
            _ => {
                return Err(url.error(
                    "give one way to log in: user:password@, `token=`, `nkey=` or `creds=`",
                ));
            }
        };
        config.timeouts = config.timeouts.read(&mut url)?;
        config.defaults = AcquireOptions::new().read(&mut url)?;
        config.state_ttl = url.duration("state_ttl")?.unwrap_or(config.state_ttl);
        let files = (url.string("ca"), url.string("cert"), url.string("key"));
        url.finish()?;
        match files {
            (ca, None, None) if tls => config = config.tls(ca.map(PathBuf::from)),
            (ca, Some(cert), Some(key)) if tls => {
                config = config
                    .tls(ca.map(PathBuf::from))
                    .client_certificate(cert, key);
            }
            (None, None, None) => {}
            _ if tls => return Err(url.error("`cert=` and `key=` go together")),
            _ => return Err(url.error("`ca`, `cert` and `key` need a tls:// URL")),
        }
        Ok(config)
    }

    /// The servers as the client dials them, checked.
    fn addresses(&self) -> Result<Vec<String>, LockError> {
        if self.servers.is_empty() {
            return Err(config_error("no servers; give at least one host:port"));
        }
        let scheme = if self.tls.is_some() { "tls" } else { "nats" };
        self.servers
            .iter()
            .map(|server| {
                if server.contains('@') {
                    // Not quoted: the part before `@` may be a password.
                    return Err(config_error(
                        "a server address contains `@`; credentials go in user:password@ of \
                         the URL or in NatsConfig::user_password",
                    ));
                }
                let host = Host::parse(server.trim()).map_err(config_error)?;
                Ok(format!("{scheme}://{}", host.address(DEFAULT_PORT)))
            })
            .collect()
    }

    fn validate(&self) -> Result<(), LockError> {
        if let Some(problem) = bucket_problem(&self.bucket) {
            return Err(config_error(problem));
        }
        check_state_ttl(BACKEND, self.state_ttl)?;
        self.timeouts.validate(BACKEND)
    }

    /// The client's options: timeouts, credentials, TLS, and no echo: a
    /// lease's loss subscription is never sent the client's own writes to
    /// its key (the grant, renewals, the release), which it would only skip;
    /// the one own write that is a loss, `delete_holder`, tells the leases
    /// itself.
    async fn options(&self) -> Result<ConnectOptions, LockError> {
        let mut options = ConnectOptions::new()
            .connection_timeout(self.timeouts.connect)
            .request_timeout(Some(self.timeouts.reply))
            .no_echo();
        options = match &self.credentials {
            Credentials::None => options,
            Credentials::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            Credentials::Token(token) => options.token(token.clone()),
            Credentials::NkeyFile(path) => {
                let seed = tokio::fs::read_to_string(path).await.map_err(|e| {
                    config_error(format!("cannot read the nkey seed file {path:?}: {e}"))
                })?;
                options.nkey(seed.trim().to_owned())
            }
            Credentials::CredsFile(path) => options
                .credentials_file(path)
                .await
                .map_err(|e| config_error(format!("cannot read the creds file {path:?}: {e}")))?,
        };
        // async-nats builds its TLS config from rustls's process default, which
        // must be one provider whatever else the application links.
        let _ = async_nats::rustls::crypto::ring::default_provider().install_default();
        if let Some(tls) = &self.tls {
            options = options.require_tls(true);
            if let Some(ca) = &tls.ca {
                options = options.add_root_certificates(ca.clone());
            }
            if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
                options = options.add_client_certificate(cert.clone(), key.clone());
            }
        }
        Ok(options)
    }

    /// Connects, opening the bucket (created on file storage when missing).
    pub async fn connect(self) -> Result<NatsLock, LockError> {
        let (client, servers) = self.dial().await?;
        self.connect_with(client, servers).await
    }

    /// Checks the config and connects: the client and the servers it talks to.
    pub(crate) async fn dial(&self) -> Result<(async_nats::Client, Servers), LockError> {
        self.validate()?;
        let addresses = self.addresses()?;
        let servers = Servers::new(addresses.join(","));
        let options = self.options().await?;
        let budget = self.timeouts.connect + self.timeouts.reply;
        match tokio::time::timeout(budget, options.connect(addresses)).await {
            Ok(Ok(client)) => Ok((client, servers)),
            Ok(Err(e)) => Err(servers.unavailable("connecting", &e)),
            Err(_) => Err(servers.unavailable(
                "connecting",
                &std::io::Error::other(format!("no connection within {budget:?}")),
            )),
        }
    }

    /// JetStream over `client`, waiting `timeout` for each reply.
    pub(crate) fn jetstream(&self, client: async_nats::Client) -> async_nats::jetstream::Context {
        let mut js = async_nats::jetstream::new(client);
        js.set_timeout(self.timeouts.reply);
        js
    }

    /// Uses an existing client (its servers, credentials and TLS) instead of
    /// connecting; the bucket, timeouts and defaults still come from this config.
    /// A client that echoes (async-nats' default; [`NatsConfig::connect`]'s does
    /// not) works too: each lease's loss subscription is then also sent the
    /// client's own writes to its key, and skips them. A client without echo
    /// shared by two `NatsLock`s: an operator's `delete_holder` through one is
    /// noticed by the other's leases at their next renewal, not at once.
    pub async fn from_client(self, client: async_nats::Client) -> Result<NatsLock, LockError> {
        self.validate()?;
        let info = client.server_info();
        let servers = Servers::new(format!("{}:{}", info.host, info.port));
        self.connect_with(client, servers).await
    }

    async fn connect_with(
        self,
        client: async_nats::Client,
        servers: Servers,
    ) -> Result<NatsLock, LockError> {
        let js = self.jetstream(client);
        let kv = protocol::open_bucket(&js, &servers, &self.bucket, self.replicas).await?;
        let backend = Arc::new(NatsBackend::open(js, kv, servers, self.state_ttl).await?);
        BackendLock::shared(backend.clone())
            .with_lock_election()
            .with_semaphore(NatsSemaphoreBackend::new(backend.clone()))
            .with_rwlock(NatsRwLockBackend::new(backend))
            .with_defaults(self.defaults)
    }
}

#[cfg(test)]
mod tests;
