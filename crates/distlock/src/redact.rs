//! Keeping secrets out of anything printed: URLs shown to people, and errors built
//! by client libraries that may quote the URL or the password they were given.

use distlock_core::toolkit::{LockUrl, redact};
use distlock_core::{BoxError, LockError};

/// What replaces a secret.
const MASK: &str = "***";

/// `url` with every password and secret query value replaced by `***`; the scheme,
/// user names, hosts, ports and paths stay readable. Text that is not a URL is
/// redacted as well as it can be, never rejected.
///
/// Use it whenever a lock URL is logged or shown.
///
/// ```
/// assert_eq!(
///     distlock::redact_url("redis://app:s3cret@cache:6379/0?password=x&db=1"),
///     "redis://app:***@cache:6379/0?password=***&db=1",
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    redact(url)
}

/// The passwords and tokens in `url`, to scrub from errors. A URL that does not
/// parse has none to find: the adapter refuses it with the same parser, whose
/// errors never quote a password.
pub(crate) fn url_secrets(backend: &'static str, url: &str) -> Vec<String> {
    LockUrl::parse(backend, url)
        .map(|url| secrets_of(&url))
        .unwrap_or_default()
}

/// The secrets of `url` (decoded), longest first so that a secret containing
/// another is masked whole. [`scrub`] masks every spelling of each.
pub(crate) fn secrets_of(url: &LockUrl) -> Vec<String> {
    let mut found = url.secrets();
    // `auth=digest:user:password`: a client library may quote the password alone.
    let tails: Vec<String> = found
        .iter()
        .filter(|secret| Some(secret.as_str()) != url.password())
        .filter_map(|secret| secret.rsplit_once(':'))
        .map(|(_, tail)| tail.to_owned())
        .filter(|tail| !tail.is_empty())
        .collect();
    found.extend(tails);
    found.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    found.dedup();
    found
}

/// Where a spelling of `secret` that starts at `start` of `text` ends: each of its
/// bytes written as itself or as a `%XX` escape (the URL as typed, or as an
/// adapter re-encoded it).
fn spelled_at(text: &[u8], start: usize, secret: &[u8]) -> Option<usize> {
    let escaped = |at: usize| {
        let hex = text.get(at + 1..at + 3)?;
        let hex = std::str::from_utf8(hex).ok()?;
        if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            u8::from_str_radix(hex, 16).ok()
        } else {
            None
        }
    };
    let mut at = start;
    for &byte in secret {
        if text.get(at) == Some(&byte) {
            at += 1;
        } else if text.get(at) == Some(&b'%') && escaped(at) == Some(byte) {
            at += 3;
        } else {
            return None;
        }
    }
    Some(at)
}

fn mask_one(text: &str, secret: &str) -> String {
    let (bytes, secret) = (text.as_bytes(), secret.as_bytes());
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match spelled_at(bytes, at, secret) {
            Some(end) if !secret.is_empty() => {
                out.extend_from_slice(MASK.as_bytes());
                at = end;
            }
            _ => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    // A spelling starts at an ASCII `%` or at a whole character of the secret
    // and ends after one, so the cuts fall on character boundaries.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn mask(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |text, secret| mask_one(&text, secret))
}

fn leaks(text: &str, secrets: &[String]) -> bool {
    mask(text, secrets) != text
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
    if leaks(&debug, secrets) || chain.iter().any(|c| leaks(c, secrets)) {
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
        error @ LockError::Unavailable { .. } => error.map_unavailable(|endpoint, source| {
            (mask(&endpoint, secrets), mask_source(source, secrets))
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(url: &str) -> Vec<String> {
        secrets_of(&LockUrl::parse("test", url).unwrap())
    }

    #[test]
    fn passwords_and_secret_params_are_masked() {
        assert_eq!(
            redact_url("redlock://:a@h1:1,h2:2,h3:3/ns?auth=digest:u:c&ttl=5s"),
            "redlock://:***@h1:1,h2:2,h3:3/ns?auth=***&ttl=5s"
        );
        assert_eq!(redact_url("zk://user@h1/chroot"), "zk://user@h1/chroot");
        assert_eq!(redact_url("memory://x"), "memory://x");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn secrets_are_found_raw_and_decoded() {
        let found = secrets("mysql://root:p%40ss@db/locks?password=two&auth=digest:u:three");
        let text = "p%40ss %70%40ss p@ss p%40%73s two digest:u:three three p%ss";
        assert_eq!(
            mask(text, &found),
            "*** *** *** *** *** *** *** p%ss",
            "{found:?}"
        );
    }

    #[test]
    fn a_password_with_a_colon_is_masked_whole_and_only_whole() {
        let found = secrets("etcd://u:p%3Aw@h");
        assert_eq!(mask("p:w p%3aw w", &found), "*** *** w");
    }

    #[test]
    fn errors_quoting_a_secret_are_masked_through_the_chain() {
        let secrets = secrets("redis://:hunter2@h:1");
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

    #[test]
    fn non_ascii_secrets_are_masked_in_any_spelling() {
        let found = secrets("redis://:p%C3%A9@h");
        assert_eq!(mask("pé p%C3%A9 p%c3%a9 é", &found), "*** *** *** é");
    }
}
