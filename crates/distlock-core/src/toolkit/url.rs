//! `LockUrl`: the one URL grammar every adapter reads its configuration from.
//!
//! ```text
//! scheme://[user[:password]@]host[:port][,host[:port]…][/path][?name=value&…]
//! ```
//!
//! Parameters are taken by name with typed getters; whatever is left when the
//! adapter calls [`LockUrl::finish`] is rejected with the list of the names the
//! adapter took, so a typo (`stratgy=`) is an error and never a silent default.

mod escape;
mod host;
mod params;
mod redact;

pub use host::Host;
pub use redact::redact;

use crate::LockError;
use escape::{decode, encode, encode_path};
use redact::{MASK, is_secret_param, shorten};
use std::fmt;

/// A lock URL taken apart, with its secrets kept out of `Display` and `Debug`.
///
/// ```
/// use distlock_core::toolkit::LockUrl;
/// use std::time::Duration;
/// let mut url = LockUrl::parse("etcd", "etcd://app:s3cret@h1:2379,h2/locks?ttl=10s&timeout=250ms")?;
/// assert_eq!(url.scheme(), "etcd");
/// assert_eq!(url.user(), Some("app"));
/// assert_eq!(url.password(), Some("s3cret"));
/// assert_eq!(url.hosts().len(), 2);
/// assert_eq!(url.path(), Some("locks"));
/// assert_eq!(url.duration("ttl")?, Some(Duration::from_secs(10)));
/// assert_eq!(url.duration("timeout")?, Some(Duration::from_millis(250)));
/// url.finish()?;
/// assert_eq!(url.to_string(), "etcd://app:***@h1:2379,h2/locks?ttl=10s&timeout=250ms");
/// # Ok::<(), distlock_core::LockError>(())
/// ```
pub struct LockUrl {
    backend: &'static str,
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<Host>,
    path: Option<String>,
    params: Vec<Param>,
    /// Every parameter name an adapter asked for, for the "known" list.
    known: Vec<&'static str>,
}

struct Param {
    name: String,
    value: String,
    taken: bool,
}

impl LockUrl {
    /// Parses `text`; errors are [`LockError::Config`] for `backend`, name the
    /// problem, show the accepted form and never the password.
    pub fn parse(backend: &'static str, text: &str) -> Result<LockUrl, LockError> {
        let invalid = |why: String| {
            LockError::config(
                backend,
                format!(
                    "`{}`: {why}; a lock URL is scheme://[user[:password]@]host[:port][,host[:port]…][/path][?name=value&…]",
                    shorten(&redact(text))
                ),
            )
        };
        let text = text.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| invalid("it has no scheme://".into()))?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(invalid(
                "the scheme is not a word like redis or etcd".into(),
            ));
        }
        if rest.contains('#') {
            return Err(invalid("a lock URL has no #fragment".into()));
        }
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match location.split_once('/') {
            Some((authority, path)) => (authority, Some(path)),
            None => (location, None),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (mut user, mut password) = (None, None);
        if let Some(userinfo) = userinfo {
            if userinfo.contains('@') || hosts.contains(',') && userinfo.contains(',') {
                return Err(invalid(
                    "credentials go once, before the first host (user:password@h1,h2)".into(),
                ));
            }
            let (name, secret) = match userinfo.split_once(':') {
                Some((name, secret)) => (name, Some(secret)),
                None => (userinfo, None),
            };
            if !name.is_empty() {
                user = Some(decode(name).map_err(|why| invalid(format!("the user name {why}")))?);
            }
            if let Some(secret) = secret {
                // Never quote the password, not even in a decoding error.
                password = Some(
                    decode(secret)
                        .map_err(|_| invalid("the password has a bad %-escape".into()))?,
                );
            }
        }
        let hosts = if hosts.is_empty() {
            Vec::new()
        } else {
            hosts
                .split(',')
                .map(|h| Host::parse(h.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(invalid)?
        };
        let path = path
            .map(|p| decode(p).map_err(|why| invalid(format!("the path {why}"))))
            .transpose()?;
        let mut params: Vec<Param> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name).map_err(|why| invalid(format!("a parameter name {why}")))?;
            let value = decode(value).map_err(|_| {
                invalid(format!(
                    "the value of parameter `{name}` has a bad %-escape"
                ))
            })?;
            if params.iter().any(|p| p.name == name) {
                return Err(invalid(format!(
                    "parameter `{name}` is given twice; keep one"
                )));
            }
            params.push(Param {
                name,
                value,
                taken: false,
            });
        }
        Ok(LockUrl {
            backend,
            scheme: scheme.to_ascii_lowercase(),
            user,
            password,
            hosts,
            path,
            params,
            known: Vec::new(),
        })
    }

    /// The scheme, lowercased (`redis`, `etcds`...).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The decoded user name, if the URL has one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The decoded password, if the URL has one. Never shown by `Display`/`Debug`.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts in the order written; empty for `scheme://` or `scheme:///path`.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The decoded path after the first `/`: `None` when the URL has no `/`,
    /// `Some("")` for a lone `/`.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// A config error for this URL's backend, mentioning the redacted URL
    /// (shortened when long).
    pub fn error(&self, why: impl fmt::Display) -> LockError {
        LockError::config(
            self.backend,
            format!("`{}`: {why}", shorten(&self.to_string())),
        )
    }
}

impl fmt::Display for LockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        match (&self.user, &self.password) {
            (Some(user), Some(_)) => write!(f, "{}:{MASK}@", encode(user))?,
            (None, Some(_)) => write!(f, ":{MASK}@")?,
            (Some(user), None) => write!(f, "{}@", encode(user))?,
            (None, None) => {}
        }
        for (i, host) in self.hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{host}")?;
        }
        if let Some(path) = &self.path {
            write!(f, "/{}", encode_path(path))?;
        }
        for (i, p) in self.params.iter().enumerate() {
            let value = if is_secret_param(&p.name) {
                MASK.to_owned()
            } else {
                encode(&p.value)
            };
            write!(
                f,
                "{}{}={value}",
                if i == 0 { '?' } else { '&' },
                encode(&p.name)
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockUrl")
            .field(&format_args!("{self}"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn reason(result: Result<impl fmt::Debug, LockError>) -> String {
        match result {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn takes_apart_every_part() {
        let url = LockUrl::parse(
            "etcd",
            "ETCDS://u%40x:p%3Aw@h1:2379,h2,[::1]:2380,::2/team%2Fa/locks?timeout=2s",
        )
        .unwrap();
        assert_eq!(url.scheme(), "etcds");
        assert_eq!(url.user(), Some("u@x"));
        assert_eq!(url.password(), Some("p:w"));
        let hosts: Vec<String> = url.hosts().iter().map(|h| h.address(1)).collect();
        assert_eq!(hosts, ["h1:2379", "h2:1", "[::1]:2380", "[::2]:1"]);
        assert_eq!(url.path(), Some("team/a/locks"));
    }

    #[test]
    fn paths_hosts_and_credentials_may_be_absent() {
        let url = LockUrl::parse("x", "zk://h").unwrap();
        assert_eq!(url.path(), None);
        assert_eq!(LockUrl::parse("x", "zk://h/").unwrap().path(), Some(""));
        let url = LockUrl::parse("x", "memory://").unwrap();
        assert!(url.hosts().is_empty() && url.user().is_none());
        let url = LockUrl::parse("x", "redis://:pw@h").unwrap();
        assert_eq!((url.user(), url.password()), (None, Some("pw")));
    }

    #[test]
    fn bad_urls_say_why_and_hide_the_password() {
        let cases = [
            ("h:2379", "no scheme"),
            ("etcd://h1,,h2", "empty"),
            ("etcd://h:0", "port"),
            ("etcd://h:99999", "port"),
            ("etcd://h:x", "port"),
            ("etcd://[::1", "never closes"),
            ("etcd://u:hunter2@h/%zz", "bad %-escape"),
            ("etcd://u:hunter2@h?a=1&a=2", "twice"),
            ("etcd://u:hunter2@h#frag", "fragment"),
            ("etcd://u:%zzhunter2@h", "password has a bad"),
            ("e tcd://h", "scheme"),
        ];
        for (text, why) in cases {
            let r = reason(LockUrl::parse("etcd", text));
            assert!(r.contains(why), "{text}: {r}");
            assert!(!r.contains("hunter2"), "{text}: {r}");
        }
    }

    #[test]
    fn display_and_debug_hide_secrets() {
        let url = LockUrl::parse("x", "redis://app:s3cret@h:1/0?auth_token=t0k&db=2").unwrap();
        for shown in [url.to_string(), format!("{url:?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains("t0k"),
                "{shown}"
            );
            assert!(
                shown.contains("app:***@h:1/0?auth_token=***&db=2"),
                "{shown}"
            );
        }
        assert_eq!(url.secrets(), ["s3cret", "t0k"]);
    }
}
