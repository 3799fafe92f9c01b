//! Which CA a `rediss://` connection trusts and which client certificate it
//! presents: the `ca`, `cert` and `key` URL parameters (PEM file paths, read
//! once when the URL is parsed) or the config's setters.
//!
//! Without `ca` the system's root certificates are trusted, as the `redis`
//! crate does by default.

use distlock_core::LockError;
use distlock_core::toolkit::LockUrl;

/// PEM contents for one server's TLS. `Debug` says which are set and never shows
/// the client key.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub ca: Option<Vec<u8>>,
    pub cert: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.is_some())
            .field("client_certificate", &self.cert.is_some())
            .field("client_key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The URL parameters this module reads.
const PARAMS: [(&str, &str); 3] = [
    ("ca", "CA certificate"),
    ("cert", "client certificate"),
    ("key", "client key"),
];

impl TlsFiles {
    /// Takes `ca`, `cert` and `key` from `url`, reading the files they name. They
    /// need TLS (`tls`: the scheme was `rediss://` or `redlocks://`). Errors name
    /// the parameter and the path, never a file's contents.
    pub fn read(url: &mut LockUrl, tls: bool) -> Result<Self, LockError> {
        let mut files = TlsFiles::default();
        for (name, what) in PARAMS {
            let Some(path) = url.string(name) else {
                continue;
            };
            if !tls {
                return Err(url.error(format_args!(
                    "parameter `{name}` is a TLS setting; it needs rediss:// (or redlocks://)"
                )));
            }
            let pem = std::fs::read(&path).map_err(|e| {
                url.error(format_args!(
                    "cannot read the {what} file `{path}` (parameter `{name}`): {e}"
                ))
            })?;
            match name {
                "ca" => files.ca = Some(pem),
                "cert" => files.cert = Some(pem),
                _ => files.key = Some(pem),
            }
        }
        Ok(files)
    }

    /// A client certificate needs its key and a key its certificate.
    pub fn validate(&self, backend: &'static str) -> Result<(), LockError> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(LockError::config(
                backend,
                "a TLS client certificate needs its key, and a key its certificate \
                 (give both cert= and key=)",
            ));
        }
        Ok(())
    }

    /// Whether anything differs from the `redis` crate's defaults.
    #[cfg(feature = "tls")]
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    /// The `redis` crate's form of these settings.
    #[cfg(feature = "tls")]
    pub fn certificates(&self) -> redis::TlsCertificates {
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        };
        redis::TlsCertificates {
            client_tls,
            root_cert: self.ca.clone(),
        }
    }
}
