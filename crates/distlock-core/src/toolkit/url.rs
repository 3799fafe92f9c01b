//! `LockUrl`: the one URL grammar every adapter reads its configuration from.
//!
//! ```text
//! scheme://[user[:password]@]host[:port][,host[:port]…][/path][?name=value&…]
//! ```
//!
//! Parameters are taken by name with typed getters; whatever is left when the
//! adapter calls [`LockUrl::finish`] is rejected with the list of the names the
//! adapter took, so a typo (`stratgy=`) is an error and never a silent default.

use super::duration::parse_duration;
use crate::LockError;
use std::fmt;
use std::time::Duration;

/// What replaces a secret wherever a URL is shown.
const MASK: &str = "***";

/// Parameters whose value is a secret, matched as substrings of the lowercased
/// name (`password`, `auth_token`, `client_secret`, ...).
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "secret", "token", "auth", "credential"];

/// One `host[:port]` of a URL. IPv6 addresses are written in brackets.
#[derive(Clone, PartialEq, Eq)]
pub struct Host {
    /// The host name or address, without brackets.
    pub host: String,
    /// The port, when the URL names one.
    pub port: Option<u16>,
}

impl Host {
    /// `host:port` with `default_port` where the URL names none, bracketing IPv6.
    pub fn address(&self, default_port: u16) -> String {
        let port = self.port.unwrap_or(default_port);
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }

    /// Parses one `host[:port]`, `[v6]:port` or bare IPv6 address.
    pub fn parse(text: &str) -> Result<Host, String> {
        let bad = |why: &str| Err(format!("host `{text}` {why}"));
        if text.is_empty() {
            return bad("is empty; list hosts as host1:port,host2:port");
        }
        if text.contains(['/', '@', ' ', '?', '#', '\\']) {
            return bad("is not host[:port]");
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            match rest.split_once(']') {
                Some((host, "")) => (host, None),
                Some((host, port)) => match port.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return bad("has text after the IPv6 address"),
                },
                None => return bad("opens an IPv6 bracket it never closes"),
            }
        } else if text.matches(':').count() > 1 {
            (text, None)
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty() {
            return bad("has no host name");
        }
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => return bad("has no valid port (1-65535)"),
            },
        };
        Ok(Host {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.host.contains(':'), self.port) {
            (true, Some(port)) => write!(f, "[{}]:{port}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(port)) => write!(f, "{}:{port}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

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

    /// Takes parameter `name` as text.
    pub fn string(&mut self, name: &'static str) -> Option<String> {
        self.known.push(name);
        self.params
            .iter_mut()
            .find(|p| p.name == name && !p.taken)
            .map(|p| {
                p.taken = true;
                p.value.clone()
            })
    }

    /// Takes parameter `name` as a duration written `250ms`, `30s`, `5m` or `1h`.
    /// Zero is refused: no timeout or ttl here means "never".
    pub fn duration(&mut self, name: &'static str) -> Result<Option<Duration>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match parse_duration(&value) {
            Ok(d) if d.is_zero() => Err(self.param_error(name, &value, "must be more than zero")),
            Ok(d) => Ok(Some(d)),
            Err(why) => Err(self.param_error(name, &value, &why)),
        }
    }

    /// Takes parameter `name` as a boolean: `true`/`false`, `1`/`0`, `yes`/`no`.
    pub fn bool(&mut self, name: &'static str) -> Result<Option<bool>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match value.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(self.param_error(name, &value, "is not true or false")),
        }
    }

    /// Takes parameter `name` and parses it with `FromStr`; `form` says what is
    /// accepted ("a replica count", "a database number 0-15").
    pub fn parse_param<T: std::str::FromStr>(
        &mut self,
        name: &'static str,
        form: &str,
    ) -> Result<Option<T>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        value
            .parse()
            .map(Some)
            .map_err(|_| self.param_error(name, &value, &format!("is not {form}")))
    }

    /// Takes parameter `name`, which must be one of `choices`.
    pub fn choice(
        &mut self,
        name: &'static str,
        choices: &[&'static str],
    ) -> Result<Option<&'static str>, LockError> {
        let Some(value) = self.string(name) else {
            return Ok(None);
        };
        match choices.iter().find(|c| **c == value) {
            Some(choice) => Ok(Some(choice)),
            None => Err(self.param_error(
                name,
                &value,
                &format!("is not one of {}", choices.join(", ")),
            )),
        }
    }

    /// Refuses a parameter that was renamed, naming its new spelling.
    pub fn renamed(&mut self, old: &'static str, new: &'static str) -> Result<(), LockError> {
        if self.params.iter().any(|p| p.name == old) {
            return Err(self.error(format_args!(
                "URL parameter `{old}` is now called `{new}`; write {new}=…"
            )));
        }
        Ok(())
    }

    /// Ends parameter reading: any parameter nobody took is an error that lists
    /// the known names (and the closest one, for a typo).
    pub fn finish(&self) -> Result<(), LockError> {
        let Some(unknown) = self.params.iter().find(|p| !p.taken) else {
            return Ok(());
        };
        let mut known = self.known.clone();
        known.sort_unstable();
        known.dedup();
        let shown = shorten(&unknown.name);
        let hint = known
            .iter()
            .filter(|k| edit_distance(k, &unknown.name) <= 2)
            .min_by_key(|k| edit_distance(k, &unknown.name))
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        let known = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        Err(self.error(format_args!(
            "unknown URL parameter `{shown}`{hint}; known parameters: {known}"
        )))
    }

    /// Every secret in the URL (password, secret parameter values), as decoded,
    /// longest first, for scrubbing error texts that a client library built.
    pub fn secrets(&self) -> Vec<String> {
        let mut found: Vec<String> = self.password.iter().cloned().collect();
        found.extend(
            self.params
                .iter()
                .filter(|p| is_secret_param(&p.name))
                .map(|p| p.value.clone()),
        );
        found.retain(|s| !s.is_empty());
        found.sort_by_key(|s| std::cmp::Reverse(s.len()));
        found
    }

    /// The error for parameter `name` whose `value` is refused `why` (a secret
    /// parameter's value is masked).
    pub fn param_error(&self, name: &str, value: &str, why: &str) -> LockError {
        let value = if is_secret_param(name) {
            MASK.to_owned()
        } else {
            shorten(value)
        };
        self.error(format_args!("URL parameter {name}={value} {why}"))
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

/// `text` (a URL or anything else) with every password and secret parameter
/// value replaced by `***`. Works on text that does not parse, too, so it is safe
/// to use on whatever a user typed.
///
/// ```
/// use distlock_core::toolkit::redact;
/// assert_eq!(
///     redact("redis://app:s3cret@cache:6379/0?password=x&db=1"),
///     "redis://app:***@cache:6379/0?password=***&db=1",
/// );
/// assert_eq!(redact("redlock://:a@h1,:b@h2"), "redlock://:***@h2");
/// ```
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let rest = match text.find("://") {
        Some(at) => {
            out.push_str(&text[..at + 3]);
            &text[at + 3..]
        }
        None => text,
    };
    // The authority ends where `LockUrl::parse` ends it, at the first `/` or `?`:
    // a `#` before that may be part of an unescaped password.
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    out.push_str(&redact_authority(authority));
    let (path, query) = tail.split_at(tail.find('?').unwrap_or(tail.len()));
    out.push_str(path);
    if let Some(query) = query.strip_prefix('?') {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value))
                    if is_secret_param(&decode(name).unwrap_or_else(|_| name.to_owned()))
                        && !value.is_empty() =>
                {
                    format!("{name}={MASK}")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// `authority` with everything from the first `:` to the last `@` masked. A
/// `,` or `@` before that `@` may be inside one unescaped password, so
/// credentials that look like one per host (`:a@h1,:b@h2`) are masked as one.
fn redact_authority(authority: &str) -> String {
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{MASK}@{hosts}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    }
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|secret| name.contains(secret))
}

/// Long values are named by length, never echoed whole.
fn shorten(text: &str) -> String {
    const SHOWN: usize = 120;
    if text.chars().count() <= SHOWN {
        text.to_owned()
    } else {
        let head: String = text.chars().take(SHOWN).collect();
        format!("{head}… ({} bytes)", text.len())
    }
}

/// Decodes `%XX` escapes; the error says what is wrong without quoting the text.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                // `from_str_radix` alone would take a sign: `%+F`.
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "has a bad %-escape (write %XX with two hex digits)".to_owned())?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "decodes to invalid UTF-8".to_owned())
}

fn encode_with(text: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || "-._~".contains(c) || keep(c) {
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

fn encode(text: &str) -> String {
    encode_with(text, |c| c == ':')
}

fn encode_path(text: &str) -> String {
    encode_with(text, |c| c == '/' || c == ':')
}

/// Levenshtein distance, for "did you mean" on misspelled parameters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let above = row[j + 1];
            row[j + 1] = (prev + cost).min(row[j] + 1).min(above + 1);
            prev = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<impl fmt::Debug, LockError>) -> String {
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
    fn typed_getters_name_the_parameter_and_the_form() {
        let mut url =
            LockUrl::parse("x", "redis://h?ttl=soon&n=x&on=maybe&mode=b&zero=0s").unwrap();
        let r = reason(url.duration("ttl"));
        assert!(r.contains("ttl=soon") && r.contains("250ms"), "{r}");
        assert!(reason(url.parse_param::<u32>("n", "a count")).contains("n=x is not a count"));
        assert!(reason(url.bool("on")).contains("on=maybe is not true or false"));
        assert!(reason(url.choice("mode", &["a", "c"])).contains("one of a, c"));
        assert!(reason(url.duration("zero")).contains("more than zero"));
        assert_eq!(url.duration("absent").unwrap(), None);
    }

    #[test]
    fn unknown_parameters_are_refused_with_the_known_ones() {
        let mut url = LockUrl::parse("mysql", "mysql://h/db?stratgy=for_update").unwrap();
        let _ = url.string("strategy");
        let _ = url.duration("ttl");
        let r = reason(url.finish());
        assert!(r.contains("unknown URL parameter `stratgy`"), "{r}");
        assert!(r.contains("did you mean `strategy`"), "{r}");
        assert!(r.contains("known parameters: strategy, ttl"), "{r}");
        let mut url = LockUrl::parse("x", "x://h?timeout=1s").unwrap();
        assert_eq!(
            url.duration("timeout").unwrap(),
            Some(Duration::from_secs(1))
        );
        url.finish().unwrap();
    }

    #[test]
    fn renamed_parameters_name_the_new_spelling() {
        let mut url = LockUrl::parse("x", "x://h?node_timeout=1s").unwrap();
        let r = reason(url.renamed("node_timeout", "timeout"));
        assert!(r.contains("now called `timeout`"), "{r}");
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

    #[test]
    fn long_values_are_named_by_length() {
        let long = "x".repeat(100_000);
        let mut url = LockUrl::parse("x", &format!("x://h?ttl={long}")).unwrap();
        let r = reason(url.duration("ttl"));
        assert!(r.len() < 1_000 && r.contains("100000 bytes"), "{r}");
    }

    #[test]
    fn redact_handles_text_that_does_not_parse() {
        assert_eq!(redact("a:b@c"), "a:***@c");
        assert_eq!(redact("redis://:p@ss@h/0"), "redis://:***@h/0");
        assert_eq!(redact("no secrets here"), "no secrets here");
        assert_eq!(redact("x://h?token="), "x://h?token=");
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("strategy", "stratgy"), 1);
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
