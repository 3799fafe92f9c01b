//! Keeping secrets out of anything printed: URLs shown to people, and errors built
//! by client libraries that may quote the URL they were given.

use distlock_core::{BoxError, LockError};

/// What replaces a secret.
const MASK: &str = "***";

/// Query parameters whose value is a secret, matched as substrings of the
/// lowercased parameter name (`password`, `auth`, `redis_token`, ...).
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "secret", "token", "auth", "credential"];

/// `url` with every password and secret query value replaced by `***`; the scheme,
/// user names, hosts, ports and paths stay readable.
///
/// Use it whenever a lock URL is logged or shown. User info is recognised in every
/// host of a multi-host URL (`redlock://:pw@h1,:pw@h2`).
///
/// ```
/// assert_eq!(
///     distlock::redact_url("redis://app:s3cret@cache:6379/0?password=x&db=1"),
///     "redis://app:***@cache:6379/0?password=***&db=1",
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    if let Some(at) = url.find("://") {
        out.push_str(&url[..at + 3]);
        rest = &url[at + 3..];
    }
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let hosts: Vec<String> = authority.split(',').map(redact_userinfo).collect();
    out.push_str(&hosts.join(","));
    let (path, query) = tail.split_at(tail.find('?').unwrap_or(tail.len()));
    out.push_str(path);
    if let Some(query) = query.strip_prefix('?') {
        let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
        out.push('?');
        let pairs: Vec<String> = query.split('&').map(redact_param).collect();
        out.push_str(&pairs.join("&"));
        out.push_str(fragment);
    }
    out
}

fn redact_userinfo(host: &str) -> String {
    match host.rsplit_once('@') {
        Some((userinfo, hostport)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:{MASK}@{hostport}"),
            None => host.to_owned(),
        },
        None => host.to_owned(),
    }
}

fn redact_param(pair: &str) -> String {
    match pair.split_once('=') {
        Some((name, value)) if is_secret_param(name) && !value.is_empty() => {
            format!("{name}={MASK}")
        }
        _ => pair.to_owned(),
    }
}

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|secret| name.contains(secret))
}

/// The secrets in `url`, as written and percent-decoded, longest first so that a
/// secret containing another is masked whole.
pub(crate) fn secrets_in(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    for host in authority.split(',') {
        if let Some((userinfo, _)) = host.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            found.push(password.to_owned());
        }
    }
    if let Some((_, query)) = tail.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=')
                && is_secret_param(name)
            {
                found.push(value.to_owned());
                // `auth=digest:user:password`: the last part alone may be quoted too.
                if let Some((_, last)) = value.rsplit_once(':') {
                    found.push(last.to_owned());
                }
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

fn mask(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), MASK)
    })
}

/// A source error whose text had a secret in it, kept as its masked text.
#[derive(Debug)]
struct Masked(String);

impl std::fmt::Display for Masked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Masked {}

/// Keeps `source` unless its chain (Display or Debug) quotes a secret; then
/// flattens the chain into masked text.
fn mask_source(source: BoxError, secrets: &[String]) -> BoxError {
    let mut chain = Vec::new();
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(error) = level {
        chain.push(error.to_string());
        level = error.source();
    }
    let debug = format!("{source:?}");
    let leaks = secrets
        .iter()
        .any(|s| debug.contains(s.as_str()) || chain.iter().any(|c| c.contains(s.as_str())));
    if leaks {
        Box::new(Masked(mask(&chain.join(": "), secrets)))
    } else {
        source
    }
}

/// Masks `secrets` wherever an error can carry text. Adapters are meant never to
/// quote a password; this is the second line, because client libraries sometimes do.
pub(crate) fn scrub(error: LockError, secrets: &[String]) -> LockError {
    if secrets.is_empty() {
        return error;
    }
    match error {
        LockError::Config { backend, reason } => LockError::Config {
            backend,
            reason: mask(&reason, secrets),
        },
        LockError::Unavailable {
            backend,
            endpoint,
            source,
        } => LockError::Unavailable {
            backend,
            endpoint: mask(&endpoint, secrets),
            source: mask_source(source, secrets),
        },
        LockError::Backend { backend, source } => LockError::Backend {
            backend,
            source: mask_source(source, secrets),
        },
        LockError::QuorumUnavailable {
            answered,
            nodes,
            needed,
            detail,
        } => LockError::QuorumUnavailable {
            answered,
            nodes,
            needed,
            detail: mask(&detail, secrets),
        },
        LockError::InvalidOptions { reason } => LockError::InvalidOptions {
            reason: mask(&reason, secrets),
        },
        other => other,
    }
}

/// Decodes `%XX` escapes; invalid escapes and bytes are kept as written.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_every_host_and_secret_params_are_masked() {
        assert_eq!(
            redact_url("redlock://:a@h1:1,u:b@h2:2,h3:3/ns?auth=digest:u:c&ttl=5"),
            "redlock://:***@h1:1,u:***@h2:2,h3:3/ns?auth=***&ttl=5"
        );
        assert_eq!(redact_url("zk://user@h1/chroot"), "zk://user@h1/chroot");
        assert_eq!(redact_url("memory://x"), "memory://x");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn secrets_are_found_raw_and_decoded() {
        let found = secrets_in("mysql://root:p%40ss@db/locks?password=two");
        for secret in ["p%40ss", "p@ss", "two"] {
            assert!(found.iter().any(|s| s == secret), "{secret} in {found:?}");
        }
    }

    #[test]
    fn errors_quoting_a_secret_are_masked_through_the_chain() {
        let secrets = secrets_in("redis://:hunter2@h:1");
        let error = LockError::Unavailable {
            backend: "redis",
            endpoint: "redis://:hunter2@h:1".into(),
            source: "auth failed for password hunter2".into(),
        };
        let scrubbed = scrub(error, &secrets);
        let shown = format!("{scrubbed} {scrubbed:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("h:1"), "{shown}");
    }
}
