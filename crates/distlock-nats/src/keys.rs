//! Where a lock lives: one KV bucket per namespace, one key per lock name, the
//! name escaped into the key alphabet NATS accepts (`[-/_=.a-zA-Z0-9]`).
//!
//! Every name of a namespace lives in the one bucket so that every token comes
//! from one stream's sequence and tokens of one name compare across holders.

use distlock_core::LockKey;

/// The bucket used when the URL names none.
pub const DEFAULT_BUCKET: &str = "distlock";

/// What every lock key starts with, so that other kinds of record can share the
/// bucket later without colliding with lock names.
const LOCK_PREFIX: &str = "lock.";
/// A fenced store's records (`fence.rs`), which the sweep never collects.
pub(crate) const FENCE_PREFIX: &str = "fence.";

/// Bytes kept as they are; every other byte becomes `=XX` (upper-case hex).
/// `.` is escaped because it separates subject tokens (an empty token or a
/// leading or trailing dot is refused by the server), and `=` because it is the
/// escape character.
fn kept(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'/')
}

/// `name` in the KV alphabet, reversibly (`=XX` for every byte not kept). A prefix of a name
/// escapes to a prefix of its escape, so a residue scan by prefix works on keys.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if kept(byte) {
            out.push(char::from(byte));
        } else {
            out.push('=');
            out.push_str(&format!("{byte:02X}"));
        }
    }
    out
}

/// The name [`escape`] made `escaped` from; `None` for text it cannot have made.
pub fn unescape(escaped: &str) -> Option<String> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'=' {
            let hex = escaped.get(i + 1..i + 3)?;
            let value = u8::from_str_radix(hex, 16).ok()?;
            if kept(value) || hex.to_ascii_uppercase() != hex {
                return None;
            }
            out.push(value);
            i += 3;
        } else if kept(byte) {
            out.push(byte);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

/// The KV key of the lock `key`.
pub fn lock_key(key: &LockKey) -> String {
    format!("{LOCK_PREFIX}{}", escape(key.as_str()))
}

/// The KV key prefix of every lock whose name starts with `prefix`.
pub fn lock_prefix(prefix: &str) -> String {
    format!("{LOCK_PREFIX}{}", escape(prefix))
}

/// The lock name a KV key holds, when it is a lock key.
pub fn lock_name(kv_key: &str) -> Option<String> {
    unescape(kv_key.strip_prefix(LOCK_PREFIX)?)
}

/// Why `bucket` cannot name a KV bucket, if it cannot (NATS allows
/// `[a-zA-Z0-9_-]+`).
pub fn bucket_problem(bucket: &str) -> Option<String> {
    if bucket.is_empty() {
        return Some("the bucket name is empty".to_owned());
    }
    let bad: Vec<char> = bucket
        .chars()
        .filter(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "the bucket name `{bucket}` has {bad:?}; a NATS KV bucket name is letters, digits, \
             `_` and `-`"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_reversible_and_stays_in_the_alphabet() {
        for name in [
            "a",
            "orders/42",
            "a.b",
            "x=y",
            "sp ace",
            "ünï",
            "..",
            "-_/",
            "%3D",
        ] {
            let escaped = escape(name);
            assert!(
                escaped
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-/_=".contains(&b)),
                "{name} -> {escaped}"
            );
            assert_eq!(unescape(&escaped).as_deref(), Some(name));
        }
        assert_eq!(escape("a.b"), "a=2Eb");
        assert_eq!(unescape("a=2eb"), None, "lower-case hex is never produced");
        assert_eq!(unescape("a=41"), None, "kept bytes are never escaped");
        assert_eq!(unescape("a=4"), None);
        assert_eq!(unescape("a.b"), None);
    }

    #[test]
    fn prefixes_escape_to_prefixes_and_keys_decode() {
        let key = LockKey::new("jobs.nightly").unwrap();
        assert!(lock_key(&key).starts_with(&lock_prefix("jobs.")));
        assert_eq!(lock_name(&lock_key(&key)).as_deref(), Some("jobs.nightly"));
        assert_eq!(lock_name("other.x"), None);
    }

    #[test]
    fn bucket_names_are_checked() {
        assert_eq!(bucket_problem("distlock_1-a"), None);
        assert!(bucket_problem("").is_some());
        assert!(bucket_problem("a.b").unwrap().contains("'.'"));
    }
}
