//! The oracle "no secret in any shown text", built so that it cannot raise a
//! false alarm.
//!
//! A secret is a byte range of the input: the password of a lock URL's userinfo,
//! or the value of a query parameter whose name marks it secret. Both are found
//! by a reference splitter written apart from `LockUrl` (same grammar, its own
//! code), so a parser bug cannot hide its own leak.
//!
//! A naive "the output contains the password" check raises false alarms: a
//! password `password` is in every URL error's `user[:password]@` form, and a
//! password may also be a host name the error rightly quotes. So each secret is
//! checked by a differential run: the same input again with the secret's
//! letters and digits rotated (`a`->`b`, `z`->`a`, `9`->`0`, also inside `%XX`
//! escapes), which keeps every character the grammar splits on and every
//! escape valid. A leak is reported only when the first run's texts contain
//! the secret and not its rotation, and the second run's texts contain the
//! rotation and not the secret: text that moves with the secret's letters came
//! from the secret. Fixed message text and the rest of the input are the same
//! in both runs, so they can never make both halves true.

use std::ops::Range;

/// Secrets shorter than this are not checked: short ones occur by chance.
pub const MIN_SECRET_CHARS: usize = 8;
/// Letters and digits the rotation must change, so the two runs differ enough.
const MIN_ROTATED: usize = 4;

/// Query parameter names (lowercased, as substrings) whose values are secret:
/// the list the core toolkit documents.
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "secret", "token", "auth", "credential"];

/// The raw user name, password and path of a lock URL, per the grammar below;
/// the lock_url target checks `LockUrl` agrees, so that these spans are the
/// parser's.
pub fn raw_parts(text: &str) -> (Option<&str>, Option<&str>, Option<&str>) {
    let trimmed = text.trim();
    let Some(scheme_end) = trimmed.find("://") else {
        return (None, None, None);
    };
    let rest = &trimmed[scheme_end + 3..];
    let location = &rest[..rest.find('?').unwrap_or(rest.len())];
    let (authority, path) = match location.split_once('/') {
        Some((authority, path)) => (authority, Some(path)),
        None => (location, None),
    };
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return (None, None, path);
    };
    match userinfo.split_once(':') {
        Some((user, password)) => (Some(user), Some(password), path),
        None => (Some(userinfo), None, path),
    }
}

/// The byte ranges of `text` that hold secrets, per the lock URL grammar
/// `scheme://[user[:password]@]host…[/path][?name=value&…]`: the query starts at
/// the first `?`, the authority ends at the first `/` before it, the userinfo
/// ends at the authority's last `@`, the password starts after its first `:`.
pub fn secret_spans(text: &str) -> Vec<Range<usize>> {
    let lead = text.len() - text.trim_start().len();
    let trimmed = text.trim();
    let mut spans = Vec::new();
    let Some(scheme_end) = trimmed.find("://") else {
        return spans;
    };
    let rest_start = lead + scheme_end + 3;
    let rest = &trimmed[scheme_end + 3..];
    let location_len = rest.find('?').unwrap_or(rest.len());
    let authority = &rest[..rest[..location_len].find('/').unwrap_or(location_len)];
    if let Some(at) = authority.rfind('@')
        && let Some(colon) = authority[..at].find(':')
    {
        spans.push(rest_start + colon + 1..rest_start + at);
    }
    if location_len < rest.len() {
        let mut start = rest_start + location_len + 1;
        for pair in rest[location_len + 1..].split('&') {
            if let Some((name, value)) = pair.split_once('=')
                && decode(name).is_some_and(|name| is_secret_name(&name))
                && !value.is_empty()
            {
                let value_start = start + name.len() + 1;
                spans.push(value_start..value_start + value.len());
            }
            start += pair.len() + 1;
        }
    }
    spans
}

fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.iter().any(|s| name.contains(s))
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Strict `%XX` decoding to UTF-8; `None` when any escape or the result is bad.
pub fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex(*bytes.get(i + 1)?)?;
            let lo = hex(*bytes.get(i + 2)?)?;
            out.push(hi * 16 + lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Decodes the valid `%XX` escapes of any text, leaving the rest as it is.
pub fn decode_lossy(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn rotate_byte(b: u8) -> u8 {
    match b {
        b'a'..=b'y' | b'A'..=b'Y' | b'0'..=b'8' => b + 1,
        b'z' => b'a',
        b'Z' => b'A',
        b'9' => b'0',
        other => other,
    }
}

/// `raw` with every ASCII letter and digit rotated, literal or `%XX`-escaped,
/// and how many were rotated. Escapes stay escapes, ASCII stays ASCII, so the
/// rotated text decodes exactly when `raw` does.
pub fn rotate(raw: &str) -> (String, usize) {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut rotated) = (0, 0);
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        let (byte, len) = match escaped {
            Some(byte) => (byte, 3),
            None => (bytes[i], 1),
        };
        let turned = rotate_byte(byte);
        if turned == byte {
            out.extend_from_slice(&bytes[i..i + len]);
        } else {
            rotated += 1;
            if len == 3 {
                out.extend_from_slice(format!("%{turned:02X}").as_bytes());
            } else {
                out.push(turned);
            }
        }
        i += len;
    }
    // Only ASCII bytes changed, to ASCII bytes: still UTF-8.
    (String::from_utf8_lossy(&out).into_owned(), rotated)
}

/// Whether `needle` occurs in `text`, also once decoded, ignoring ASCII case.
fn occurs_in(text: &str, needle: &str) -> bool {
    let needle = needle.to_ascii_lowercase();
    text.to_ascii_lowercase().contains(&needle)
        || decode_lossy(text).to_ascii_lowercase().contains(&needle)
}

/// Checks one secret `span` of `input` (found within `input[url]` by
/// [`secret_spans`]; pass `0..input.len()` for a plain URL): panics, naming the
/// texts, if `shown` (what the code under test displays for an input) leaks it.
pub fn check_span(input: &str, span: Range<usize>, shown: &dyn Fn(&str) -> Vec<String>) {
    let raw = &input[span.clone()];
    let Some(secret) = decode(raw) else {
        return; // The URL does not parse far enough to have this secret.
    };
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    let (raw2, rotated) = rotate(raw);
    if rotated < MIN_ROTATED {
        return;
    }
    let Some(secret2) = decode(&raw2) else {
        return; // Cannot happen (see `rotate`); checked rather than assumed.
    };
    let (before, after) = (&input[..span.start], &input[span.end..]);
    for needle in [raw, &secret, &raw2, &secret2] {
        if occurs_in(before, needle) || occurs_in(after, needle) {
            return; // The rest of the input may rightly be quoted.
        }
    }
    let control = format!("{before}{raw2}{after}");
    let first = shown(input).join("\n");
    let second = shown(&control).join("\n");
    let views = |text: &str| [text.to_owned(), decode_lossy(text)];
    for (view1, view2) in views(&first).iter().zip(views(&second).iter()) {
        for (s1, s2) in [(raw, raw2.as_str()), (secret.as_str(), secret2.as_str())] {
            let leaked = view1.contains(s1)
                && !view1.contains(s2)
                && view2.contains(s2)
                && !view2.contains(s1);
            assert!(
                !leaked,
                "secret {s1:?} (bytes {span:?} of the input) is shown:\n\
                 input: {input:?}\nshown: {first}\n\
                 control input: {control:?}\ncontrol shown: {second}"
            );
        }
    }
}

/// Checks every secret of the lock URL `input`.
pub fn check_url(input: &str, shown: &dyn Fn(&str) -> Vec<String>) {
    for span in secret_spans(input) {
        check_span(input, span, shown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_follow_the_grammar() {
        let url = " redis://u:pa@ss@h:1/0?password=x%41yz&db=1 ";
        let spans: Vec<&str> = secret_spans(url).into_iter().map(|s| &url[s]).collect();
        assert_eq!(spans, ["pa@ss", "x%41yz"]);
        assert!(secret_spans("redis://h/u:p@x").is_empty());
    }

    #[test]
    fn rotation_keeps_escapes_and_punctuation() {
        assert_eq!(rotate("az:9%41%2F%7a"), ("ba:0%42%2F%61".to_owned(), 5));
    }

    #[test]
    fn fixed_text_and_quoted_hosts_are_not_leaks() {
        let echo_fixed = |_: &str| vec!["user[:password]@host".to_owned()];
        check_url("x://u:password@h", &echo_fixed);
        let echo_host = |t: &str| vec![t.rsplit('@').next().unwrap_or("").to_owned()];
        check_url("x://u:hostname1@hostname1", &echo_host);
    }

    #[test]
    #[should_panic(expected = "is shown")]
    fn an_echoed_password_is_a_leak() {
        check_url("x://u:s3cr%65tpass@h", &|t: &str| vec![decode_lossy(t)]);
    }
}
