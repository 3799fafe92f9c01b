//! One function per fuzz target, so that a regression test replays an input
//! through exactly the checks the fuzzer ran. Each takes the raw fuzz input,
//! must not panic, and must show no secret (see [`crate::secret`]).

use crate::secret::{check_url, decode, raw_parts};
use distlock_core::toolkit::{LockUrl, parse_duration, redact};
use distlock_core::{LockError, LockKey};
use std::fmt::Debug;

/// Every text an error shows: Display, Debug and each source's Display.
pub fn error_texts(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut shown = vec![error.to_string(), format!("{error:?}")];
    let mut source = error.source();
    while let Some(cause) = source {
        shown.push(cause.to_string());
        source = cause.source();
    }
    shown
}

/// What a parse result shows: the config's Debug, or the error's texts.
pub fn result_texts<T: Debug>(result: &Result<T, LockError>) -> Vec<String> {
    match result {
        Ok(config) => vec![format!("{config:?}")],
        Err(error) => error_texts(error),
    }
}

fn utf8(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `LockKey::new`: accepts exactly 1..=512 bytes without control characters,
/// keeps the name verbatim.
pub fn key(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let valid =
        !text.is_empty() && text.len() <= LockKey::MAX_LEN && !text.chars().any(char::is_control);
    match LockKey::new(text) {
        Ok(key) => {
            assert!(valid, "accepted {text:?}");
            assert_eq!(key.as_str(), text);
            assert_eq!(key.to_string(), text);
            assert_eq!(text.parse::<LockKey>().ok().as_ref(), Some(&key));
        }
        Err(error) => {
            assert!(!valid, "refused {text:?}: {error}");
            assert!(matches!(error, LockError::InvalidKey { .. }), "{error:?}");
        }
    }
}

/// Nanoseconds per unit, for the exact reference below.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// `digits[.digits]unit` in whole nanoseconds, when it is one (and not huge).
fn exact_nanos(text: &str) -> Option<u128> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let per_unit = unit_nanos(unit.trim())?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || whole.len() + fraction.len() > 30 || fraction.contains('.') {
        return None;
    }
    let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
    let value: u128 = format!("{whole}{fraction}").parse().ok()?;
    let nanos = value.checked_mul(per_unit)?;
    (nanos % scale == 0).then_some(nanos / scale)
}

/// `parse_duration`: every refusal shows the accepted form; a value that is a
/// whole number of nanoseconds up to a day parses to exactly that.
pub fn duration(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    match parse_duration(text) {
        Ok(parsed) => {
            if let Some(nanos) = exact_nanos(text).filter(|n| *n <= 86_400_000_000_000) {
                assert_eq!(parsed.as_nanos(), nanos, "{text:?}");
            }
        }
        Err(why) => assert!(why.contains("250ms"), "{text:?}: {why}"),
    }
}

/// Every parameter name an adapter reads, plus secret-looking ones.
const NAMES: &[&str] = &[
    "ttl",
    "timeout",
    "connect_timeout",
    "namespace",
    "tls",
    "db",
    "strategy",
    "password",
    "auth_token",
    "protocol",
    "insecure",
    "acl",
    "node_timeout",
];

/// Reads `text` as a `LockUrl` with the getters chosen by `ops` (one per name),
/// returning every text it shows: errors, `Display`, `Debug`, `redact`.
fn lock_url_texts(ops: u8, text: &str) -> Vec<String> {
    let mut shown = vec![redact(text)];
    let mut url = match LockUrl::parse("fuzz", text) {
        Ok(url) => url,
        Err(error) => {
            shown.extend(error_texts(&error));
            return shown;
        }
    };
    // A getter's value is data, not shown text (`string("password")` rightly
    // returns the password): only errors count.
    let push = |shown: &mut Vec<String>, r: Result<String, LockError>| {
        if let Err(error) = r {
            shown.extend(error_texts(&error));
        }
    };
    for (i, name) in NAMES.iter().enumerate() {
        let r = match (usize::from(ops) + i) % 8 {
            0 => Ok(format!("{:?}", url.string(name))),
            1 => url.duration(name).map(|d| format!("{d:?}")),
            2 => url.bool(name).map(|b| format!("{b:?}")),
            3 => url
                .parse_param::<u32>(name, "a count")
                .map(|n| format!("{n:?}")),
            4 => url.choice(name, &["a", "b"]).map(|c| format!("{c:?}")),
            5 => url.renamed(name, "timeout").map(|()| String::new()),
            6 => url
                .parse_param::<i64>(name, "a number")
                .map(|n| format!("{n:?}")),
            _ => Ok(String::new()),
        };
        push(&mut shown, r);
    }
    push(&mut shown, url.finish().map(|()| String::new()));
    shown.push(url.error("fuzz").to_string());
    shown.push(url.to_string());
    shown.push(format!("{url:?}"));
    shown.extend(url.hosts().iter().map(|h| h.address(1)));
    // The oracle's own splitter must find what the parser found: its spans
    // are only the parser's secrets if so.
    let (user, password, path) = raw_parts(text);
    let decoded = |raw: Option<&str>| {
        raw.map(|r| decode(r).unwrap_or_else(|| format!("{r:?} does not decode")))
    };
    assert_eq!(
        url.password(),
        decoded(password).as_deref(),
        "password of {text:?}"
    );
    assert_eq!(
        url.user(),
        decoded(user).filter(|u| !u.is_empty()).as_deref(),
        "user of {text:?}"
    );
    assert_eq!(url.path(), decoded(path).as_deref(), "path of {text:?}");
    if let Some(password) = url.password().filter(|p| !p.is_empty()) {
        assert!(url.secrets().iter().any(|s| s == password), "{text:?}");
    }
    shown
}

/// `LockUrl::parse`, every getter, `finish`, `Display`/`Debug` and `redact`.
/// The first byte picks which getter reads which parameter.
pub fn lock_url(data: &[u8]) {
    let Some((&ops, rest)) = data.split_first() else {
        return;
    };
    let Some(text) = utf8(rest) else { return };
    check_url(text, &|t| lock_url_texts(ops, t));
}

/// The facade's `BackendKind::from_url` and `redact_url`, then the URL parser of
/// every registered backend (`Registration::parse`): the input's text after
/// `://` under each of the registry's schemes in turn, so that every backend's
/// parser is fuzzed here without a target of its own.
pub fn backend_url(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    check_url(text, &|t| {
        let mut shown = result_texts(&distlock::BackendKind::from_url(t));
        shown.push(distlock::redact_url(t));
        shown
    });
    let rest = text.split_once("://").map_or(text, |(_, rest)| rest);
    for registration in distlock::BackendKind::all().filter_map(distlock::BackendKind::registration) {
        for scheme in registration.schemes() {
            check_url(&format!("{scheme}://{rest}"), &|t| {
                result_texts(&registration.parse(t))
            });
        }
    }
}
