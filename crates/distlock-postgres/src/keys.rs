//! The row layout: a lock is the row `(namespace, name)` of the lock table,
//! both columns `TEXT` holding the key and namespace verbatim; an advisory
//! lock's 64-bit key is a stable hash of the two; the table name is a
//! validated identifier.

use distlock_core::{LockError, LockKey};
use distlock_sql::SqlDatabase;
use sha2::{Digest, Sha256};
use sqlx::Postgres;

/// The namespace used when none is configured.
pub const DEFAULT_NAMESPACE: &str = "distlock";

/// The advisory lock key of `name` in `namespace`: the first 8 bytes of
/// SHA-256 over the namespace's length (8 bytes, big-endian), the namespace
/// and the name, read as a big-endian `i64`. Stable across processes,
/// versions and platforms, so every client maps a name to the same key.
///
/// Two names can map to one key (about one chance in 2^64 per pair): they
/// would share one lock. The adapter records the name beside the key and
/// refuses the second name with an error naming both (see `advisory.rs`).
pub fn advisory_key(namespace: &str, name: &LockKey) -> i64 {
    let mut hash = Sha256::new();
    hash.update((namespace.len() as u64).to_be_bytes());
    hash.update(namespace.as_bytes());
    hash.update(name.as_str().as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The payload of the release notification for `name`: the namespace, a
/// newline, the name. Neither may hold a control character, so it is
/// unambiguous.
pub(crate) fn wake_payload(namespace: &str, name: &str) -> String {
    format!("{namespace}\n{name}")
}

/// Checks a namespace: 1 to 128 bytes of UTF-8 without control characters.
pub(crate) fn validate_namespace(namespace: &str) -> Result<(), LockError> {
    if namespace.is_empty() || namespace.len() > 128 {
        return Err(LockError::config(
            Postgres::BACKEND,
            format!(
                "namespace must be 1 to 128 bytes, got {} bytes; for example namespace={DEFAULT_NAMESPACE}",
                namespace.len()
            ),
        ));
    }
    if namespace.chars().any(char::is_control) {
        return Err(LockError::config(
            Postgres::BACKEND,
            "namespace must not contain control characters",
        ));
    }
    Ok(())
}

/// The lock table's name, validated as a plain identifier (always
/// double-quoted in SQL).
pub type TableName = distlock_sql::adapter::TableName<Postgres>;

/// The `advisory` table used when none is configured.
pub(crate) const DEFAULT_ADVISORY_TABLE: &str = "distlock_advisory";

/// The longest suffix of the tables a `version_cas` table has beside it
/// (`_sem`, `_rw`).
const LONGEST_SUFFIX: &str = "_sem";

/// Checks that the semaphore's and read-write lock's tables beside `table`
/// fit PostgreSQL's 63-byte identifiers (it would silently truncate them, and
/// two tables could then meet).
pub(crate) fn check_room_for_primitives(table: &TableName) -> Result<(), LockError> {
    let most = 63 - LONGEST_SUFFIX.len();
    let name = table.as_str();
    if name.len() > most {
        return Err(LockError::config(
            Postgres::BACKEND,
            format!(
                "table name `{name}` is {} bytes; version_cas keeps its semaphores and read-write locks in \
                 tables named after it (`{name}{LONGEST_SUFFIX}`), so it must be at most {most} bytes",
                name.len(),
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_stable_and_separate_namespaces() {
        let key = LockKey::new("a/b").unwrap();
        assert_eq!(
            advisory_key("distlock", &key),
            advisory_key("distlock", &key)
        );
        assert_ne!(advisory_key("distlock", &key), advisory_key("other", &key));
        // The namespace's length is hashed too: ("ab", "c") is not ("a", "bc").
        let (c, bc) = (LockKey::new("c").unwrap(), LockKey::new("bc").unwrap());
        assert_ne!(advisory_key("ab", &c), advisory_key("a", &bc));
        // Pinned: a change here would split running fleets into two locks.
        assert_eq!(advisory_key("distlock", &key), 1_528_686_472_436_006_620);
    }

    #[test]
    fn namespaces_and_tables_are_checked() {
        assert!(validate_namespace("").is_err());
        assert!(validate_namespace("a\nb").is_err());
        assert!(validate_namespace("app/locks").is_ok());
        for good in ["locks", "_x", "Locks_2"] {
            assert!(TableName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "1locks", "a\"b", "a.b", "a$b", &"a".repeat(64)] {
            assert!(TableName::new(bad).is_err(), "{bad:?}");
        }
        let longest = TableName::new(&"a".repeat(59)).unwrap();
        assert!(check_room_for_primitives(&longest).is_ok());
        let too_long = TableName::new(&"a".repeat(60)).unwrap();
        let refused = check_room_for_primitives(&too_long)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("at most 59 bytes"), "{refused}");
    }
}
