//! One server address with its credentials, parsed from a `redis://` URL or set
//! field by field. Credentials never leave this module except into the `redis`
//! crate's client: `Debug` and [`Server::endpoint`] leave them out.

use distlock_core::LockError;
use std::time::Duration;

/// A Redis server to connect to.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Skip TLS certificate verification (`#insecure`).
    pub insecure: bool,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
    pub resp3: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("endpoint", &self.endpoint())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// The default Redis port.
pub(crate) const DEFAULT_PORT: u16 = 6379;

impl Server {
    pub fn new(host: &str, port: u16) -> Self {
        Server {
            host: host.to_owned(),
            port,
            tls: false,
            insecure: false,
            username: None,
            password: None,
            db: 0,
            resp3: false,
        }
    }

    /// `redis://host:port/db` (or `rediss://`), never with credentials.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}/{}", self.port, self.db)
    }

    /// The identity of the server for duplicate detection.
    pub fn address(&self) -> (String, u16) {
        (self.host.to_ascii_lowercase(), self.port)
    }

    /// Parses a `redis://` or `rediss://` URL. Query parameters are returned for
    /// the caller to interpret; `protocol` is handled here.
    pub fn parse(
        backend: &'static str,
        input: &str,
    ) -> Result<(Self, Vec<(String, String)>), LockError> {
        let bad = |why: String| LockError::config(backend, why);
        let url = url::Url::parse(input.trim())
            .map_err(|e| bad(format!("cannot parse the URL `{}`: {e}", redact(input))))?;
        let tls = match url.scheme() {
            "redis" | "valkey" => false,
            "rediss" | "valkeys" => true,
            other => {
                return Err(bad(format!(
                    "unsupported scheme `{other}://`; use redis://host:port/db or rediss:// for TLS"
                )));
            }
        };
        let host = match url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(host) => host.to_string(),
            None => return Err(bad(format!("the URL `{}` has no host", redact(input)))),
        };
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| {
                bad("the user or password in the URL is not valid percent-encoded UTF-8".into())
            })
        };
        let username = match url.username() {
            "" => None,
            user => Some(decode(user)?),
        };
        let password = url.password().map(decode).transpose()?;
        let db = match url.path().trim_matches('/') {
            "" => 0,
            path => path
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| {
                    bad(format!(
                        "the URL path `/{path}` is not a database number; use /0, /1, ..."
                    ))
                })?,
        };
        let insecure = match url.fragment() {
            None | Some("") => false,
            Some("insecure") if tls => true,
            Some(other) => {
                return Err(bad(format!(
                    "unknown URL fragment `#{other}`; only `#insecure` (rediss:// without certificate checks) is known"
                )));
            }
        };
        let mut server = Server {
            host,
            port: url.port().unwrap_or(DEFAULT_PORT),
            tls,
            insecure,
            username,
            password,
            db,
            resp3: false,
        };
        let mut params = Vec::new();
        for (key, value) in url.query_pairs() {
            if key == "protocol" {
                server.resp3 = match &*value {
                    "2" | "resp2" => false,
                    "3" | "resp3" => true,
                    _ => {
                        return Err(bad(format!(
                            "protocol={value} is not known; use resp2 or resp3"
                        )));
                    }
                };
            } else {
                params.push((key.into_owned(), value.into_owned()));
            }
        }
        Ok((server, params))
    }

    /// The `redis` crate's client for this server.
    pub fn client(&self, backend: &'static str) -> Result<redis::Client, LockError> {
        if self.tls && !cfg!(feature = "tls") {
            return Err(LockError::config(
                backend,
                format!(
                    "{} needs TLS: enable the `tls` feature of distlock-redis",
                    self.endpoint()
                ),
            ));
        }
        #[cfg(feature = "tls")]
        if self.tls {
            // rustls needs a process-wide crypto provider; an application that
            // installed its own keeps it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut url = url::Url::parse(&self.endpoint()).map_err(|e| {
            LockError::config(
                backend,
                format!("cannot build a URL for {}: {e}", self.endpoint()),
            )
        })?;
        // Setting credentials on a `redis://host` URL cannot fail.
        let _ = url.set_username(&percent_encode(self.username.as_deref().unwrap_or("")));
        let _ = url.set_password(self.password.as_deref().map(percent_encode).as_deref());
        if self.resp3 {
            url.set_query(Some("protocol=resp3"));
        }
        if self.insecure {
            url.set_fragment(Some("insecure"));
        }
        redis::Client::open(url.as_str())
            .map_err(|e| LockError::config(backend, format!("{}: {e}", self.endpoint())))
    }
}

/// The URL with any password replaced, for error messages.
pub(crate) fn redact(input: &str) -> String {
    match url::Url::parse(input.trim()) {
        Ok(mut url) => {
            if url.password().is_some() {
                let _ = url.set_password(Some("***"));
            }
            url.to_string()
        }
        // An unparsable URL may still hold a password: show only the scheme.
        Err(_) => match input.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => "(not a URL)".into(),
        },
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Parses a duration parameter such as `250ms` or `5s`.
pub(crate) fn parse_duration(
    backend: &'static str,
    name: &str,
    value: &str,
) -> Result<Duration, LockError> {
    humantime::parse_duration(value).map_err(|e| {
        LockError::config(
            backend,
            format!("{name}={value} is not a duration ({e}); write it like 250ms or 5s"),
        )
    })
}

/// Checks that a timeout is usable.
pub(crate) fn check_timeout(
    backend: &'static str,
    name: &str,
    value: Duration,
) -> Result<(), LockError> {
    if value.is_zero() {
        return Err(LockError::config(
            backend,
            format!("{name} is zero; give it a positive duration"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_credentials_db_tls_and_protocol() {
        let (s, params) = Server::parse(
            "redis",
            "rediss://u%40x:p%3Ass@cache.example:7000/3?protocol=resp3&namespace=a:#insecure",
        )
        .unwrap();
        assert_eq!(s.host, "cache.example");
        assert_eq!(s.port, 7000);
        assert!(s.tls && s.insecure && s.resp3);
        assert_eq!(s.username.as_deref(), Some("u@x"));
        assert_eq!(s.password.as_deref(), Some("p:ss"));
        assert_eq!(s.db, 3);
        assert_eq!(params, vec![("namespace".to_owned(), "a:".to_owned())]);
        assert_eq!(s.endpoint(), "rediss://cache.example:7000/3");
    }

    #[test]
    fn defaults_and_ipv6() {
        let (s, _) = Server::parse("redis", "redis://[::1]").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.db, s.tls),
            ("::1", 6379, 0, false)
        );
        assert_eq!(s.endpoint(), "redis://[::1]:6379/0");
    }

    #[test]
    fn bad_urls_give_config_errors_without_secrets() {
        for bad in [
            "http://h",
            "redis://:secret@h/x",
            "redis://:secret@h/0#what",
            "redis://:secret@h/0?protocol=9",
            "redis:///0",
            "not a url",
        ] {
            match Server::parse("redis", bad) {
                Err(LockError::Config { reason, .. }) => {
                    assert!(!reason.contains("secret"), "{reason}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn debug_and_redact_hide_the_password() {
        let (s, _) = Server::parse("redis", "redis://user:hunter2@h:1/0").unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(!redact("redis://user:hunter2@h:1/0").contains("hunter2"));
        assert!(!redact("redis://user:hunter2@h:notaport").contains("hunter2"));
    }
}
