//! TLS settings (feature `tls`).

use crate::error::BACKEND;
use distlock_core::LockError;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// `error`, from a first request over TLS, with what to check when the server
/// could not be reached. etcd refuses a missing or untrusted client certificate
/// only after the handshake (TLS 1.3), so the client may see just a closed
/// connection instead of the server's alert; a handshake failure the client
/// did see is a `Config` error already.
pub(crate) fn hint(error: LockError) -> LockError {
    error.map_unavailable(|endpoint, source| {
        let hint = "over TLS: if the server runs, check that `ca=` names the CA that signed \
                    etcd's certificate, and give `cert=` and `key=` if etcd requires client \
                    certificates";
        (endpoint, format!("{source} ({hint})").into())
    })
}

/// How to verify etcd's certificate and, optionally, which client certificate to
/// present. The client key never appears in `Debug`.
///
/// ```no_run
/// use distlock_etcd::{EtcdConfig, EtcdTls};
/// let tls = EtcdTls::new()
///     .ca_certificate(std::fs::read("/etc/etcd/ca.pem")?)
///     .domain("etcd.internal");
/// let config = EtcdConfig::new(["etcd.internal:2379"]).tls(tls);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct EtcdTls {
    ca_pem: Option<Vec<u8>>,
    cert_pem: Option<Vec<u8>>,
    key_pem: Option<Vec<u8>>,
    domain: Option<String>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.cert_pem.is_some())
            .field("client_key", &self.key_pem.as_ref().map(|_| "<redacted>"))
            .field("domain", &self.domain)
            .finish()
    }
}

impl EtcdTls {
    /// No CA yet: give the one that signed etcd's certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CA certificate (PEM) that signed the server certificates.
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// A client certificate and its key (both PEM), for etcd's `--client-cert-auth`.
    pub fn client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.cert_pem = Some(cert_pem.into());
        self.key_pem = Some(key_pem.into());
        self
    }

    /// The name to verify the server certificate against, when it differs from the
    /// host in the endpoint.
    pub fn domain(mut self, name: impl Into<String>) -> Self {
        self.domain = Some(name.into());
        self
    }

    /// Settings from an `etcds://` URL's parameters: `ca`, `cert`, `key` (PEM
    /// file paths, read now) and `domain`. The error names the parameter and the
    /// file, never a file's contents.
    pub(crate) fn from_params(params: &[(&'static str, String)]) -> Result<Self, String> {
        let mut tls = EtcdTls::new();
        for (name, value) in params {
            let read = |what: &str| {
                std::fs::read(value).map_err(|e| {
                    format!("cannot read the {what} file `{value}` (parameter `{name}`): {e}")
                })
            };
            match *name {
                "ca" => tls.ca_pem = Some(read("CA certificate")?),
                "cert" => tls.cert_pem = Some(read("client certificate")?),
                "key" => tls.key_pem = Some(read("client key")?),
                _ => tls.domain = Some(value.clone()),
            }
        }
        Ok(tls)
    }

    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if self.ca_pem.is_none() {
            return Err(LockError::config(
                BACKEND,
                "TLS needs the CA certificate that signed etcd's certificates (ca=/path/ca.pem or EtcdTls::ca_certificate)",
            ));
        }
        if self.cert_pem.is_some() != self.key_pem.is_some() {
            return Err(LockError::config(
                BACKEND,
                "a client certificate needs its key, and a key its certificate",
            ));
        }
        Ok(())
    }

    pub(crate) fn client_options(&self) -> ClientTlsConfig {
        let mut options = ClientTlsConfig::new();
        if let Some(ca) = &self.ca_pem {
            options = options.ca_certificate(Certificate::from_pem(ca));
        }
        if let (Some(cert), Some(key)) = (&self.cert_pem, &self.key_pem) {
            options = options.identity(Identity::from_pem(cert, key));
        }
        if let Some(domain) = &self.domain {
            options = options.domain_name(domain.clone());
        }
        options
    }
}
