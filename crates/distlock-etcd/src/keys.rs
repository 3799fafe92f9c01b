//! Where a lock lives in etcd.
//!
//! A lock named `name` under namespace `ns` is the key range
//! `ns + escape(name) + "/"`: its *queue*. Every contender puts one key in it,
//! `queue + <lease id as Go's %x>`, and the key with the lowest create revision holds
//! the lock. That is the layout of etcd's Go `concurrency.Mutex` and `etcdctl lock`,
//! so names without `/` or `%` contend with them under the same namespace.
//!
//! `escape` turns `%` into `%25` and `/` into `%2F` and leaves everything else
//! alone. An escaped name has no `/`, so the queue of `a` (`a/`) can never contain a
//! key of `a/b` (`a%2Fb/...`): a prefix range in etcd's own client catches longer
//! names, which is the pitfall this closes. Escaping `%` keeps it injective (`a/b`
//! and the literal `a%2Fb` stay apart).

use distlock_core::LockKey;

/// The name as it appears in etcd keys: `%` becomes `%25`, `/` becomes `%2F`,
/// everything else is kept. Distinct names give distinct results, none containing
/// `/`, and a name's escape starts with the escape of each of its prefixes.
///
/// ```
/// use distlock_etcd::escape_name;
/// assert_eq!(escape_name("orders"), "orders");
/// assert_eq!(escape_name("a/b"), "a%2Fb");
/// assert_eq!(escape_name("100%"), "100%25");
/// ```
pub fn escape_name(name: &str) -> String {
    let mut escaped = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '/' => escaped.push_str("%2F"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The key range holding `key`'s queue under `namespace` (a raw key prefix such as
/// `"distlock/"`, or `""`): `namespace + escape_name(key) + "/"`. Operators can list
/// it with `etcdctl get --prefix`; the holder is the key with the lowest create
/// revision.
///
/// ```
/// use distlock_core::LockKey;
/// use distlock_etcd::queue_prefix;
/// let key = LockKey::new("jobs/nightly")?;
/// assert_eq!(queue_prefix("distlock/", &key), b"distlock/jobs%2Fnightly/".to_vec());
/// # Ok::<(), distlock_core::LockError>(())
/// ```
pub fn queue_prefix(namespace: &str, key: &LockKey) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(namespace.len() + key.as_str().len() + 8);
    prefix.extend_from_slice(namespace.as_bytes());
    prefix.extend_from_slice(escape_name(key.as_str()).as_bytes());
    prefix.push(b'/');
    prefix
}

/// The key prefix of every queue of a lock name starting with `prefix`:
/// `namespace + escape_name(prefix)`. Escaping keeps name prefixes, so this
/// catches exactly those names' queues.
pub(crate) fn names_prefix(namespace: &str, prefix: &str) -> Vec<u8> {
    format!("{namespace}{}", escape_name(prefix)).into_bytes()
}

/// The key range of `key`'s read-write lock under `namespace`:
/// `namespace + "%rw/" + escape_name(key) + "/"`, with readers' keys in its
/// `read/` part and writers' in its `write/` part, each `<lease id as %x>` as
/// in a lock queue. An escaped name never starts with `%rw` (a `%` is always
/// followed by `25` or `2F`), so no lock queue contains these keys, and the
/// read-write lock of a name is independent of its lock.
///
/// ```
/// use distlock_core::LockKey;
/// use distlock_etcd::rwlock_prefix;
/// let key = LockKey::new("catalog")?;
/// assert_eq!(rwlock_prefix("distlock/", &key), b"distlock/%rw/catalog/".to_vec());
/// # Ok::<(), distlock_core::LockError>(())
/// ```
pub fn rwlock_prefix(namespace: &str, key: &LockKey) -> Vec<u8> {
    let mut prefix = rwlock_names_prefix(namespace, key.as_str());
    prefix.push(b'/');
    prefix
}

/// The key prefix of every read-write lock whose name starts with `prefix`.
pub(crate) fn rwlock_names_prefix(namespace: &str, prefix: &str) -> Vec<u8> {
    format!("{namespace}%rw/{}", escape_name(prefix)).into_bytes()
}

/// The key range of `key`'s semaphore under `namespace`:
/// `namespace + "%sem/" + escape_name(key) + "/"`. It holds the waiting keys
/// (`queue/<lease id as %x>`, ordered by create revision) and the permits
/// (`slots/<n>`, one per slot in use), each carrying the limit in use as its
/// value and on its client's lease. As for
/// [`rwlock_prefix`], no lock queue or read-write lock contains these keys.
///
/// ```
/// use distlock_core::LockKey;
/// use distlock_etcd::semaphore_prefix;
/// let key = LockKey::new("workers")?;
/// assert_eq!(semaphore_prefix("distlock/", &key), b"distlock/%sem/workers/".to_vec());
/// # Ok::<(), distlock_core::LockError>(())
/// ```
pub fn semaphore_prefix(namespace: &str, key: &LockKey) -> Vec<u8> {
    let mut prefix = semaphore_names_prefix(namespace, key.as_str());
    prefix.push(b'/');
    prefix
}

/// The key prefix of every semaphore whose name starts with `prefix`.
pub(crate) fn semaphore_names_prefix(namespace: &str, prefix: &str) -> Vec<u8> {
    format!("{namespace}%sem/{}", escape_name(prefix)).into_bytes()
}

/// Under a semaphore's range: the key where the previous release kept the
/// limit, without a lease; deleted when the semaphore is next found unused.
pub(crate) const LIMIT_KEY: &[u8] = b"limit";

/// Under a semaphore's range: where waiting keys go.
pub(crate) const QUEUE_DIR: &[u8] = b"queue/";

/// Under a semaphore's range: where permits go, one key per slot in use.
pub(crate) const SLOTS_DIR: &[u8] = b"slots/";

/// The part of a read-write lock's range where readers' keys go.
pub(crate) const READ_DIR: &[u8] = b"read/";

/// The part of a read-write lock's range where writers' keys go.
pub(crate) const WRITE_DIR: &[u8] = b"write/";

/// One contender's key in a queue: the lease id formatted like Go's `%x` of an
/// `int64` (so a negative id reads `-1f`), as etcd's own lock does. `slot` is 0
/// unless the same client already has a key in this queue on the same lease (it
/// waits on one name twice); then `_<slot>` keeps the keys apart, inside the queue.
pub(crate) fn contender_key(queue: &[u8], lease: i64, slot: u32) -> Vec<u8> {
    let id = if lease < 0 {
        format!("-{:x}", lease.unsigned_abs())
    } else {
        format!("{lease:x}")
    };
    let mut key = queue.to_vec();
    key.extend_from_slice(id.as_bytes());
    if slot > 0 {
        key.extend_from_slice(format!("_{slot}").as_bytes());
    }
    key
}

/// The first key after every key starting with `prefix` (etcd's range end for a
/// prefix). An all-`0xff` prefix has no end: `\0` means "to the end of the keyspace".
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A key for messages: UTF-8 where it is, escaped bytes where it is not.
pub(crate) fn printable(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LockKey {
        LockKey::new(name).unwrap()
    }

    #[test]
    fn plain_names_keep_etcds_native_layout() {
        assert_eq!(queue_prefix("", &key("job")), b"job/");
        assert_eq!(
            contender_key(b"job/", 0x694d_7f4e_1a2b_3c4d, 0),
            b"job/694d7f4e1a2b3c4d"
        );
    }

    #[test]
    fn negative_lease_ids_are_formatted_like_go() {
        assert_eq!(contender_key(b"q/", -0x1f, 0), b"q/-1f");
        assert_eq!(contender_key(b"q/", i64::MIN, 0), b"q/-8000000000000000");
    }

    #[test]
    fn second_key_on_one_lease_gets_a_suffix_inside_the_queue() {
        let second = contender_key(b"q/", 0xab, 2);
        assert_eq!(second, b"q/ab_2");
        assert!(second.starts_with(b"q/"));
    }

    #[test]
    fn no_queue_contains_another_names_keys() {
        let names: Vec<&str> = distlock_testkit::cases::NAMES_THAT_MUST_NOT_COLLIDE
            .into_iter()
            .chain(["a%", "a%2"])
            .collect();
        for &outer in &names {
            let queue = queue_prefix("ns/", &key(outer));
            for inner in names.iter().filter(|n| **n != outer) {
                let other = contender_key(&queue_prefix("ns/", &key(inner)), 0x1234, 3);
                assert!(
                    !other.starts_with(&queue),
                    "`{inner}`'s key {other:?} is in `{outer}`'s queue"
                );
            }
        }
    }

    #[test]
    fn escape_is_injective_and_slash_free() {
        assert_ne!(escape_name("a/b"), escape_name("a%2Fb"));
        assert_eq!(escape_name("a%2Fb"), "a%252Fb");
        assert!(!escape_name("/a//b/").contains('/'));
    }

    #[test]
    fn escape_preserves_name_prefixes() {
        assert!(escape_name("dlt/case/k").starts_with(&escape_name("dlt/case/")));
    }

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
