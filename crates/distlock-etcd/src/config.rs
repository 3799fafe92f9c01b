//! Configuration from a struct or an `etcd://` URL, and connecting.

use crate::error::{BACKEND, Context};
use crate::lock::{EtcdBackend, EtcdLock};
use distlock_core::{BackendLock, LockError};
use etcd_client::{Client, ConnectOptions};
use std::sync::Arc;
use std::time::Duration;

/// The namespace used when none is given.
pub const DEFAULT_NAMESPACE: &str = "distlock/";
const DEFAULT_PORT: u16 = 2379;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 ping interval: finds dead connections (etcd refuses pings under 5 s apart).
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// How to reach etcd and where to keep the locks.
///
/// ```
/// use distlock_etcd::EtcdConfig;
/// use std::time::Duration;
/// let config = EtcdConfig::new(["10.0.0.1:2379", "10.0.0.2:2379"])
///     .namespace("billing/locks/")
///     .auth("locker", "s3cret")
///     .request_timeout(Duration::from_secs(2));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// let same = EtcdConfig::from_url("etcd://locker:s3cret@10.0.0.1:2379,10.0.0.2:2379/billing/locks?request_timeout=2s")?;
/// assert_eq!(format!("{config:?}"), format!("{same:?}"));
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    namespace: String,
    user: Option<(String, String)>,
    connect_timeout: Duration,
    request_timeout: Duration,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::EtcdTls>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("EtcdConfig");
        s.field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("password", &self.user.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout);
        #[cfg(feature = "tls")]
        s.field("tls", &self.tls);
        s.finish()
    }
}

fn config_error(reason: impl Into<String>) -> LockError {
    LockError::config(BACKEND, reason)
}

impl EtcdConfig {
    /// Endpoints as `host:port` (port 2379 when left out), the default namespace
    /// (`distlock/`) and 5 s connect and request timeouts.
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            user: None,
            connect_timeout: DEFAULT_TIMEOUT,
            request_timeout: DEFAULT_TIMEOUT,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The raw key prefix every lock key starts with, used verbatim like Go's
    /// `namespace.NewKV` (so include the trailing `/`). `""` puts locks at the root,
    /// where `etcdctl lock NAME` keeps them.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Logs in as `user`. The password never appears in `Debug` or errors.
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Longest wait for a connection to an endpoint.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest wait for any one reply.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Connects over TLS with these settings (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: crate::tls::EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Parses `etcd://[user:password@]host[:port][,host[:port]...][/namespace][?options]`.
    ///
    /// - The path is the namespace, with a `/` appended when missing: `/locks` gives
    ///   `locks/`, `/` gives the root (where `etcdctl lock` keeps its locks), and no
    ///   path gives `distlock/`. Percent-escapes are decoded.
    /// - Options: `connect_timeout` and `request_timeout` (`500ms`, `5s`, `1m`).
    /// - `etcds://` connects over TLS (feature `tls`), with options `ca`, `cert`,
    ///   `key` (PEM file paths) and `domain` (the name to verify).
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let parsed = crate::url::EtcdUrl::parse(url)?;
        let mut config = EtcdConfig::new(parsed.endpoints);
        config.namespace = parsed.namespace;
        config.user = parsed.user;
        #[cfg(feature = "tls")]
        let mut tls = parsed.tls.then(crate::tls::EtcdTls::new);
        #[cfg(not(feature = "tls"))]
        if parsed.tls {
            return Err(config_error(
                "etcds:// needs TLS support: enable the `tls` feature of distlock-etcd",
            ));
        }
        for (name, value) in parsed.options {
            match name.as_str() {
                "connect_timeout" => config.connect_timeout = crate::url::duration(&name, &value)?,
                "request_timeout" => config.request_timeout = crate::url::duration(&name, &value)?,
                #[cfg(feature = "tls")]
                "ca" | "cert" | "key" | "domain" => match tls.take() {
                    Some(settings) => tls = Some(settings.option(&name, &value)?),
                    None => {
                        return Err(config_error(format!(
                            "option `{name}` needs an etcds:// URL"
                        )));
                    }
                },
                _ => {
                    return Err(config_error(format!(
                        "unknown option `{name}` in the etcd URL; known: connect_timeout, request_timeout{}",
                        if cfg!(feature = "tls") {
                            ", ca, cert, key, domain (etcds://)"
                        } else {
                            ""
                        }
                    )));
                }
            }
        }
        #[cfg(feature = "tls")]
        {
            config.tls = tls;
        }
        Ok(config)
    }

    fn validate(&self) -> Result<(), LockError> {
        if self.endpoints.is_empty() {
            return Err(config_error("no endpoints; give at least one host:port"));
        }
        for endpoint in &self.endpoints {
            crate::url::check_endpoint(endpoint.trim()).map_err(config_error)?;
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        for (name, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if timeout.is_zero() {
                return Err(config_error(format!("{name} is zero; use a few seconds")));
            }
        }
        if self.user.as_ref().is_some_and(|(user, _)| user.is_empty()) {
            return Err(config_error("the user name is empty"));
        }
        Ok(())
    }

    fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.uses_tls() { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| {
                format!(
                    "{scheme}://{}",
                    crate::url::with_port(e.trim(), DEFAULT_PORT)
                )
            })
            .collect()
    }

    fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Connects, logs in, and learns the cluster's minimum lease ttl (one grant and
    /// one revoke). Unreachable endpoints and refused credentials give
    /// `Unavailable` and `Config` errors within the connect and request timeouts.
    pub async fn connect(self) -> Result<EtcdLock, LockError> {
        self.validate()?;
        let urls = self.endpoint_urls();
        let ctx = Context {
            endpoints: Arc::from(
                urls.iter()
                    .map(|u| u.split_once("://").map_or(u.as_str(), |(_, rest)| rest))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            request_timeout: self.request_timeout,
        };
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(PING_INTERVAL, self.request_timeout)
            .with_keep_alive_while_idle(false)
            // A member cut off from the leader fails requests and ends watches at
            // once, instead of serving a watch that will never fire.
            .with_require_leader(true);
        if let Some((user, password)) = &self.user {
            options = options
                .with_user(user, password)
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.client_options());
        }
        let budget = self.connect_timeout + self.request_timeout;
        let client = match tokio::time::timeout(budget, Client::connect(&urls, Some(options))).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(ctx.classify("connect", e).into_lock_error(&ctx)),
            Err(_) => return Err(ctx.unavailable(format!("no connection within {budget:?}"))),
        };
        let backend = EtcdBackend::start(&client, self.namespace, ctx, budget).await?;
        Ok(BackendLock::new(backend))
    }
}
