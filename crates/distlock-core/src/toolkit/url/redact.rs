//! Keeping secrets out of what is shown: the masks for passwords and secret
//! parameters, [`redact`] for text that may not even parse, and the shortening
//! of long values in error texts. Apart so that every place that shows a URL
//! masks it by the same rules.

use super::LockUrl;
use super::escape::decode;

/// What replaces a secret wherever a URL is shown.
pub(super) const MASK: &str = "***";

/// Parameters whose value is a secret, matched as substrings of the lowercased
/// name (`password`, `auth_token`, `client_secret`, ...).
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "secret", "token", "auth", "credential"];

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

pub(super) fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|secret| name.contains(secret))
}

/// Long values are named by length, never echoed whole.
pub(super) fn shorten(text: &str) -> String {
    const SHOWN: usize = 120;
    if text.chars().count() <= SHOWN {
        text.to_owned()
    } else {
        let head: String = text.chars().take(SHOWN).collect();
        format!("{head}… ({} bytes)", text.len())
    }
}

impl LockUrl {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_handles_text_that_does_not_parse() {
        assert_eq!(redact("a:b@c"), "a:***@c");
        assert_eq!(redact("redis://:p@ss@h/0"), "redis://:***@h/0");
        assert_eq!(redact("no secrets here"), "no secrets here");
        assert_eq!(redact("x://h?token="), "x://h?token=");
    }
}
