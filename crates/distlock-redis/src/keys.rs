//! Where one lock lives in Redis: its lock key, fence counter and channel.
//!
//! Layout for namespace `ns` and lock name `name`:
//!
//! | what | key |
//! |---|---|
//! | lock (owner value, PX ttl) | `ns{name}` |
//! | fence counter (expires `state_ttl` after the last lease's expiry) | `ns{name}:fence` |
//! | release channel | `ns{name}:ch` |
//! | restart-guard marker, one per namespace (only with a guard) | `nsrestart-guard` |
//! | high-water of the namespace's tokens (never expires), one server | `nshigh-water` |
//! | the same in a Redis Cluster, one per slot `s` | `nshigh-water:{{<n>}`, `{<n>` hashing to `s` |
//! | fence record of a `RedisFence` resource `r` without a hash tag | `nsfence:{r}` |
//! | fence record of a resource `r` with hash tag `t` | `nsfence:{t}:r` |
//!
//! `name` is escaped so that it never contains a brace: `%` → `%25`, `{` → `%7B`,
//! `}` → `%7D`. Redis Cluster hashes the text between the first `{` and the first
//! `}` after it, so the hash tag of all three is exactly the escaped name: they
//! share one slot for every name, and distinct names stay distinct keys. The
//! marker has no brace, so no lock's keys can collide with it.
//!
//! The high-water key is one per namespace, so that it never expires and stays
//! bounded; in a Cluster one per slot, since a script may only touch keys of
//! the name's slot (see [`high_water`]). Its hash tag starts with `{`, which no
//! escaped name has, so it is never a lock's key in any namespace.
//!
//! A fenced resource is the application's own key, used verbatim, so it cannot
//! be escaped; its fence record is placed in its slot instead (see
//! [`fence_record`]). Lock keys start `ns{`, fence records `nsfence:`, so the two
//! never collide.

use distlock_core::{LockError, LockKey};

/// The namespace used when none is configured.
pub const DEFAULT_NAMESPACE: &str = "distlock:";

/// The Redis names of one lock, for operators and tools (`redis-cli`, a fence
/// check, a harness). The adapters compute them the same way.
///
/// ```
/// use distlock_core::LockKey;
/// use distlock_redis::LockKeys;
/// let keys = LockKeys::new("distlock:", &LockKey::new("jobs/{nightly}")?);
/// assert_eq!(keys.lock, "distlock:{jobs/%7Bnightly%7D}");
/// assert_eq!(keys.fence, "distlock:{jobs/%7Bnightly%7D}:fence");
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// Holds the owner value while the lock is held.
    pub lock: String,
    /// The fence counter; expires once the name has been idle for the
    /// client's `state_ttl` (see [`crate::RedisConfig::state_ttl`]).
    pub fence: String,
    /// Release messages are published here.
    pub channel: String,
}

/// Checks a namespace: braces would move the Cluster hash tag away from the name.
pub(crate) fn validate_namespace(backend: &'static str, namespace: &str) -> Result<(), LockError> {
    if namespace.contains(['{', '}']) {
        return Err(LockError::config(
            backend,
            format!(
                "namespace {namespace:?} contains a brace; braces would change the Redis Cluster \
                 hash tag of every lock key, choose a namespace without `{{` and `}}`"
            ),
        ));
    }
    if namespace.chars().any(char::is_control) {
        return Err(LockError::config(
            backend,
            format!("namespace {namespace:?} contains a control character"),
        ));
    }
    Ok(())
}

/// Escapes a lock name so that it contains no brace and stays injective.
pub(crate) fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    escape_into(&mut out, name);
    out
}

fn escape_into(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// `base` followed by `suffix`, in one allocation.
fn suffixed(base: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(base.len() + suffix.len());
    out.push_str(base);
    out.push_str(suffix);
    out
}

impl LockKeys {
    /// The keys of `key` under `namespace`. Built without `format!`: every
    /// acquire makes them, and the formatting machinery cost more than the
    /// copies.
    pub fn new(namespace: &str, key: &LockKey) -> Self {
        let name = key.as_str();
        let mut lock = String::with_capacity(namespace.len() + name.len() + 2);
        lock.push_str(namespace);
        lock.push('{');
        escape_into(&mut lock, name);
        lock.push('}');
        LockKeys {
            fence: suffixed(&lock, ":fence"),
            channel: suffixed(&lock, ":ch"),
            lock,
        }
    }
}

/// The restart-guard marker of `namespace`: a hash `{run_id, until}` that never
/// expires (see the acquire script).
pub(crate) fn guard_marker(namespace: &str) -> String {
    format!("{namespace}restart-guard")
}

/// The hash tag Redis Cluster hashes instead of the whole key: the text between
/// the first `{` and the first `}` after it, if that text is not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// CRC16/XMODEM, as Redis Cluster uses for key slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The number of Redis Cluster slots.
const SLOTS: u16 = 16384;

/// Redis Cluster's `keyHashSlot`: the hash tag if there is a non-empty one.
fn slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16(hashed.as_bytes()) % SLOTS
}

/// For each slot, the smallest `n` whose tag `{<n>` hashes to it: computed
/// once (about 170 000 CRCs, a few milliseconds), 64 KiB.
static SLOT_TAGS: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
    let mut tags = vec![u32::MAX; usize::from(SLOTS)];
    let mut left = SLOTS;
    let mut n = 0u32;
    while left > 0 {
        let at = usize::from(crc16(format!("{{{n}").as_bytes()) % SLOTS);
        if tags[at] == u32::MAX {
            tags[at] = n;
            left -= 1;
        }
        n += 1;
    }
    tags
});

/// The high-water key of the namespace of `name_key` (any key of a name, such
/// as its lock key `ns{name}`): one per namespace, or, in a Redis Cluster
/// (`cluster`), one per namespace and slot, in the slot of `name_key`, so
/// that the name's scripts may raise and read it.
pub(crate) fn high_water(name_key: &str, cluster: bool) -> String {
    let namespace = name_key.find('{').map_or(name_key, |at| &name_key[..at]);
    if !cluster {
        return suffixed(namespace, "high-water");
    }
    let tag = SLOT_TAGS[usize::from(slot(name_key))];
    format!("{namespace}high-water:{{{{{tag}}}")
}

/// The key holding the highest token a `RedisFence` admitted for `resource`:
/// in the same Redis Cluster slot as `resource`, so one script can use both,
/// and distinct for distinct resources.
///
/// With a hash tag `t`, the record is `<ns>fence:{t}:<resource>`; without one,
/// the whole resource is hashed, so it becomes the tag: `<ns>fence:{<resource>}`.
/// The namespace has no brace, so the record's first `{` is the one written
/// here, and its first `}` after it closes `t` (which has none) or the resource
/// (which then must have none): the record hashes exactly what the resource
/// hashes. Injective: the text up to that `}` gives the tag or the resource, and
/// only tagged records go on after it.
///
/// A resource without a hash tag that contains `}` (`a}b`, `x{}y`) cannot be
/// made a tag, and is refused with [`LockError::InvalidKey`], as is a resource
/// that is itself a fence record of this namespace.
pub(crate) fn fence_record(namespace: &str, resource: &str) -> Result<String, LockError> {
    let records = format!("{namespace}fence:");
    if resource.starts_with(&records) {
        return Err(LockError::InvalidKey {
            reason: format!(
                "the fenced resource `{resource}` starts with `{records}`, where this fence keeps \
                 its token records; fence another key or configure another namespace"
            ),
        });
    }
    match hash_tag(resource) {
        Some(tag) => Ok(format!("{records}{{{tag}}}:{resource}")),
        None if resource.contains('}') => Err(LockError::InvalidKey {
            reason: format!(
                "the fenced resource `{resource}` contains `}}` but has no Redis Cluster hash \
                 tag, so its fence record cannot be put in its hash slot; rename the key with \
                 a hash tag (a non-empty `{{…}}` before any other `}}`), e.g. `{{stock}}:{resource}`"
            ),
        }),
        None => Ok(format!("{records}{{{resource}}}")),
    }
}

/// A `SCAN MATCH` pattern for the lock keys (not fence counters) of every name that
/// starts with `prefix`: lock keys end in `}`, fence keys in `}:fence`.
pub(crate) fn lock_key_pattern(namespace: &str, prefix: &str) -> String {
    format!("{}*}}", names_pattern(namespace, prefix))
}

/// A `SCAN MATCH` pattern for every key of every name that starts with
/// `prefix`: lock keys, fence counters, queues, the shares' keys (not the
/// namespace's high-water or restart marker, which have no `{` after it).
pub(crate) fn state_key_pattern(namespace: &str, prefix: &str) -> String {
    format!("{}*", names_pattern(namespace, prefix))
}

/// `ns{<escaped prefix>` with the pattern's special characters escaped.
fn names_pattern(namespace: &str, prefix: &str) -> String {
    let mut pattern = String::new();
    for c in format!("{namespace}{{{}", escape(prefix)).chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_function_matches_redis_reference_values() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot("foo{{bar}}zap"), crc16(b"{bar") % 16384);
    }

    #[test]
    fn all_keys_of_a_lock_share_one_slot_for_any_name() {
        let names = [
            "a",
            "{",
            "}",
            "{}",
            "}{",
            "{x}",
            "a{b}c",
            "{{",
            "}}",
            "%7B",
            "%",
            "a}b{c",
            "ключ/🔒",
            "x y",
            "a:fence",
            "{a}:ch",
        ];
        for ns in ["distlock:", "", "app/locks:"] {
            for name in names {
                let keys = LockKeys::new(ns, &LockKey::new(name).unwrap());
                let tag = escape(name);
                assert_eq!(slot(&keys.lock), crc16(tag.as_bytes()) % 16384, "{name}");
                assert_eq!(slot(&keys.fence), slot(&keys.lock), "{name}");
                assert_eq!(slot(&keys.channel), slot(&keys.lock), "{name}");
            }
        }
    }

    #[test]
    fn the_high_water_key_is_one_per_namespace_or_per_slot_in_its_names_slot() {
        let name = |n: &str| LockKeys::new("ns:", &LockKey::new(n).unwrap());
        assert_eq!(high_water(&name("a").lock, false), "ns:high-water");
        assert_eq!(high_water(&name("{b}").fence, false), "ns:high-water");
        let mut keys = std::collections::HashSet::new();
        for i in 0..2000 {
            let keys_of = name(&format!("order/{i}"));
            let key = high_water(&keys_of.lock, true);
            assert!(key.starts_with("ns:high-water:{{"), "{key}");
            assert_eq!(slot(&key), slot(&keys_of.lock), "{key}");
            assert_eq!(key, high_water(&keys_of.fence, true));
            keys.insert(key);
        }
        // One key per slot, however many names share it.
        let slots: std::collections::HashSet<_> = keys.iter().map(|k| slot(k)).collect();
        assert_eq!(keys.len(), slots.len());
        assert!(SLOT_TAGS.iter().all(|&tag| tag != u32::MAX));
    }

    #[test]
    fn escaping_keeps_names_distinct_and_readable() {
        let names = ["{x}", "%7Bx%7D", "%", "%25", "a/b", "a%2Fb", "a", "A"];
        let escaped: std::collections::HashSet<_> = names.iter().map(|n| escape(n)).collect();
        assert_eq!(escaped.len(), names.len());
        let keys = LockKeys::new("distlock:", &LockKey::new("orders/42").unwrap());
        assert_eq!(keys.lock, "distlock:{orders/42}");
        assert_eq!(keys.fence, "distlock:{orders/42}:fence");
        assert_eq!(keys.channel, "distlock:{orders/42}:ch");
        assert_eq!(escape("{x}"), "%7Bx%7D");
    }

    #[test]
    fn a_fence_record_shares_its_resource_slot_and_is_distinct_per_resource() {
        let resources = [
            "stock",
            "{stock}:sku-1",
            "{stock}:sku-2",
            "a{b}c",
            "{{a}b",
            "foo{{bar}}zap",
            "{",
            "x{",
            "{stock}",
            "}{x}",
            "fence-x",
            "ключ/🔒",
        ];
        let mut records = std::collections::HashSet::new();
        for ns in ["distlock:", "", "app/fences:"] {
            for resource in resources {
                let record = fence_record(ns, resource).unwrap();
                assert_eq!(slot(&record), slot(resource), "{ns}: {resource} → {record}");
                assert!(records.insert(record), "{ns}: {resource} shares a record");
            }
        }
        assert_eq!(fence_record("d:", "stock").unwrap(), "d:fence:{stock}");
        assert_eq!(
            fence_record("d:", "{u1}:cart").unwrap(),
            "d:fence:{u1}:{u1}:cart"
        );
        // `{stock}` (tag `stock`) and `stock` (no tag) hash alike but stay apart.
        assert_eq!(
            fence_record("d:", "{stock}").unwrap(),
            "d:fence:{stock}:{stock}"
        );
    }

    #[test]
    fn resources_whose_record_cannot_share_their_slot_are_refused() {
        for resource in ["a}b", "{}", "foo{}{bar}", "a}b{c", "d:fence:x"] {
            match fence_record("d:", resource) {
                Err(LockError::InvalidKey { reason }) => {
                    assert!(reason.contains(resource), "{reason}");
                }
                other => panic!("{resource}: {other:?}"),
            }
        }
        assert!(fence_record("other:", "d:fence:x").is_ok());
    }

    #[test]
    fn namespaces_with_braces_are_rejected() {
        assert!(validate_namespace("redis", "app{1}:").is_err());
        assert!(validate_namespace("redis", "app:").is_ok());
    }

    #[test]
    fn residue_pattern_matches_lock_keys_only() {
        assert_eq!(lock_key_pattern("ns:", "p*/{a}"), "ns:{p\\*/%7Ba%7D*}");
        assert_eq!(state_key_pattern("ns:", "p*/{a}"), "ns:{p\\*/%7Ba%7D*");
    }
}
