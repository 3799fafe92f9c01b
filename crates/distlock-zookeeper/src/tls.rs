//! TLS to ZooKeeper's `secureClientPort`: the CA to trust and an optional
//! client certificate (`tls=true&ca=…&cert=…&key=…`, or [`ZkTls`]).
//!
//! The settings parse in every build; connecting with them needs the crate's
//! `tls` feature (the `tls` feature of the `distlock` facade turns it on).

use crate::error::ZkError;
use distlock_core::LockError;
use distlock_core::toolkit::LockUrl;
#[cfg(feature = "tls")]
use std::io::ErrorKind;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// The CA that signed the servers' certificates and, for a server with
/// `ssl.clientAuth=need`, a client certificate and key, all PEM. `Debug` never
/// shows the key.
///
/// ```
/// use distlock_zookeeper::{ZkConfig, ZkTls};
/// let tls = ZkTls::new("-----BEGIN CERTIFICATE-----\n…");
/// let config = ZkConfig::new(["zk1:2281"]).tls(tls);
/// assert!(config.tls.is_some());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkTls {
    ca_pem: String,
    identity: Option<(String, String)>,
}

impl std::fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkTls")
            .field("client_certificate", &self.identity.is_some())
            .field("client_key", &self.identity.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl ZkTls {
    /// Trusts the CA certificate(s) in `ca_pem`, and only those.
    pub fn new(ca_pem: impl Into<String>) -> Self {
        ZkTls {
            ca_pem: ca_pem.into(),
            identity: None,
        }
    }

    /// Presents this client certificate and key (PEM) to the server.
    pub fn client_identity(
        mut self,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> Self {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Reads `tls`, `ca`, `cert` and `key` from `url`, reading the files now.
    /// Errors name the parameter and the path, never a file's contents.
    pub(crate) fn read(url: &mut LockUrl) -> Result<Option<Self>, LockError> {
        let on = url.bool("tls")?.unwrap_or(false);
        let [ca, cert, key] =
            ["ca", "cert", "key"].map(|name| url.string(name).map(|path| (name, path)));
        if !on {
            if let Some((name, _)) = ca.iter().chain(&cert).chain(&key).next() {
                return Err(url.error(format_args!(
                    "parameter `{name}` is a TLS setting; add tls=true (and point the URL at the \
                     servers' secureClientPort)"
                )));
            }
            return Ok(None);
        }
        let read =
            |param: Option<(&str, String)>, what: &str| -> Result<Option<String>, LockError> {
                let Some((name, path)) = param else {
                    return Ok(None);
                };
                std::fs::read_to_string(&path).map(Some).map_err(|e| {
                    url.error(format_args!(
                        "cannot read the {what} file `{path}` (parameter `{name}`): {e}"
                    ))
                })
            };
        let Some(ca_pem) = read(ca, "CA certificate")? else {
            return Err(url.error(
                "tls=true needs ca=/path/ca.pem, the CA that signed the servers' certificates",
            ));
        };
        let identity = match (read(cert, "client certificate")?, read(key, "client key")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(url.error(
                    "a TLS client certificate needs its key, and a key its certificate (give both \
                     cert= and key=)",
                ));
            }
        };
        Ok(Some(ZkTls { ca_pem, identity }))
    }

    /// The client crate's options. rustls needs a process-wide crypto provider,
    /// and with both ring (the other adapters') and aws-lc-rs (this client's
    /// default) compiled in it cannot pick one itself: ring is installed unless
    /// the application installed its own.
    #[cfg(feature = "tls")]
    pub(crate) fn options(&self) -> Result<zookeeper_client::TlsOptions, zookeeper_client::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = zookeeper_client::TlsOptions::new().with_pem_ca(&self.ca_pem)?;
        match &self.identity {
            Some((cert, key)) => options.with_pem_identity(cert, key),
            None => Ok(options),
        }
    }
}

/// Opens one session, over TLS when `tls` is set (which `ZkConfig::validate`
/// refuses in a build without the `tls` feature).
pub(crate) async fn connect(
    connector: zk::Connector,
    connect_string: &str,
    tls: Option<&ZkTls>,
) -> Result<zk::Client, zk::Error> {
    #[cfg(feature = "tls")]
    if let Some(tls) = tls {
        return connector
            .with_tls(tls.options()?)
            .secure_connect(connect_string)
            .await;
    }
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    connector.connect(connect_string).await
}

/// `error` (a session that never came), or why a TLS handshake with the first
/// server fails when TLS is on and it does: an untrusted certificate, a client
/// certificate the server wanted, a plain port. The client crate only logs it.
pub(crate) async fn explain(
    tls: Option<&ZkTls>,
    servers: &[String],
    error: ZkError,
    within: Duration,
) -> ZkError {
    let (Some(tls), Some(server)) = (tls, servers.first()) else {
        return error;
    };
    #[cfg(feature = "tls")]
    {
        let (tls, probed) = (tls.clone(), server.clone());
        let reason = tokio::task::spawn_blocking(move || tls.handshake_failure(&probed, within));
        if let Ok(Some(reason)) = reason.await {
            return ZkError::Tls {
                server: server.clone(),
                reason,
            };
        }
    }
    let _ = (tls, server, within);
    error
}

#[cfg(feature = "tls")]
impl ZkTls {
    /// One TLS handshake with `server` (`host:port`) on a blocking socket, with
    /// these settings: the handshake's error, or the server's alert right after
    /// it (TLS 1.3 servers refuse a missing client certificate only then).
    /// `None` when it succeeds or the server cannot be reached at all.
    fn handshake_failure(&self, server: &str, within: Duration) -> Option<String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        use std::io::Read;
        use std::net::ToSocketAddrs;

        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()).flatten() {
            roots.add(cert).ok()?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots);
        let config = match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .ok()?;
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?;
                builder.with_client_auth_cert(chain, key).ok()?
            }
            None => builder.with_no_client_auth(),
        };
        let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
        let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).ok()?;
        let mut connection = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
        let address = server.to_socket_addrs().ok()?.next()?;
        let mut socket = std::net::TcpStream::connect_timeout(&address, within).ok()?;
        socket.set_read_timeout(Some(within)).ok()?;
        socket.set_write_timeout(Some(within)).ok()?;
        let mut stream = rustls::Stream::new(&mut connection, &mut socket);
        // A server that accepts waits for the session request: the read times out.
        match stream.read(&mut [0u8; 1]) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) => Some(e.to_string()),
            Ok(_) => None,
        }
    }
}
