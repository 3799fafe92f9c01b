//! The row layout: how lock names become row names (and counter rows), the
//! byte ranges that select a prefix, and the validated table name.

use distlock_core::LockKey;
use sha2::{Digest, Sha256};

/// Bytes in the `name` column (`VARBINARY(255)`): fits every row format's index
/// limit on MySQL 8 and MariaDB.
pub const NAME_COLUMN_BYTES: usize = 255;

/// Longest name stored as it is; one byte stays free for the counter marker.
const VERBATIM_MAX: usize = NAME_COLUMN_BYTES - 1;

/// How much of an over-long name is kept readable before its hash.
const HASHED_PREFIX: usize = VERBATIM_MAX - 1 - 64;

/// Separates a kept prefix from the hash. Lock keys cannot hold control
/// characters, so no verbatim name contains it.
const HASH_MARK: u8 = 0x1d;

/// Ends the name of a fence counter row; never in a lock row's name.
const COUNTER_MARK: u8 = 0x1e;

/// The row name of `key`: its UTF-8 bytes when they fit (254 bytes), otherwise
/// the first 189 bytes, 0x1D, and the lowercase hex SHA-256 of the whole key.
/// Deterministic, so every client maps a key to the same row, and injective
/// short of a SHA-256 collision.
pub fn row_name(key: &LockKey) -> Vec<u8> {
    let bytes = key.as_str().as_bytes();
    if bytes.len() <= VERBATIM_MAX {
        return bytes.to_vec();
    }
    let mut name = bytes[..HASHED_PREFIX].to_vec();
    name.push(HASH_MARK);
    for byte in Sha256::digest(bytes) {
        name.extend_from_slice(format!("{byte:02x}").as_bytes());
    }
    name
}

/// The row that holds `row`'s fencing counter (unique_insert, for_update): the
/// lock row name plus 0x1E. for_update's counter rows are never deleted;
/// unique_insert's are collected once idle (see `backend`).
pub fn counter_name(row: &[u8]) -> Vec<u8> {
    let mut name = row.to_vec();
    name.push(COUNTER_MARK);
    name
}

/// The byte range `[low, high)` holding exactly the names that start with
/// `prefix`: `high` is the prefix with its last byte below 0xFF raised by one
/// (lock names are UTF-8, so a prefix never consists of 0xFF bytes only).
pub(crate) fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let low = prefix.to_vec();
    let mut high = low.clone();
    while let Some(last) = high.pop() {
        if last < 0xFF {
            high.push(last + 1);
            break;
        }
    }
    (low, high)
}

/// The range holding exactly `row`: every other name is either below it or
/// above `row` + 0x00.
pub(crate) fn exact_range(row: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut high = row.to_vec();
    high.push(0);
    (row.to_vec(), high)
}

/// `row` as an SQL hex literal, `X'…'` in uppercase hex digits: the only form
/// in which a name is ever placed into SQL text.
pub(crate) fn hex_literal(row: &[u8]) -> String {
    let mut literal = String::with_capacity(3 + 2 * row.len());
    literal.push_str("X'");
    for byte in row {
        literal.push_str(&format!("{byte:02X}"));
    }
    literal.push('\'');
    literal
}

/// The name in the last hex literal of `text` (as [`hex_literal`] writes it).
pub(crate) fn name_in_text(text: &str) -> Option<Vec<u8>> {
    let start = text.rfind("X'")? + 2;
    let digits = text[start..].split('\'').next()?;
    if digits.len() % 2 != 0 {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(digits.get(at..at + 2)?, 16).ok())
        .collect()
}

pub(crate) use distlock_sql::shares::display_name;

/// The lock table's name, validated as a plain identifier.
pub type TableName = distlock_sql::adapter::TableName<sqlx::MySql>;

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::LockError;

    #[test]
    fn short_names_are_stored_verbatim_and_long_ones_hashed_to_fit() {
        let short = LockKey::new("a/b").unwrap();
        assert_eq!(row_name(&short), b"a/b");
        let long = LockKey::new("x".repeat(512)).unwrap();
        let other = LockKey::new(format!("{}y", "x".repeat(511))).unwrap();
        let (a, b) = (row_name(&long), row_name(&other));
        assert_eq!(a.len(), VERBATIM_MAX);
        assert_ne!(a, b, "names sharing a prefix stay distinct");
        assert_eq!(a, row_name(&long), "hashing is deterministic");
        assert!(counter_name(&a).len() <= NAME_COLUMN_BYTES);
        let edge = LockKey::new("z".repeat(VERBATIM_MAX)).unwrap();
        assert_eq!(row_name(&edge).len(), VERBATIM_MAX);
    }

    #[test]
    fn ranges_select_a_prefix_or_one_name() {
        assert_eq!(prefix_range(b"ab"), (b"ab".to_vec(), b"ac".to_vec()));
        assert_eq!(prefix_range(b"a\xff"), (b"a\xff".to_vec(), b"b".to_vec()));
        assert_eq!(prefix_range(b"\xff").1, b"");
        let (low, high) = exact_range(b"ab");
        assert!(low.as_slice() <= b"ab".as_slice() && b"ab".as_slice() < high.as_slice());
        assert!(b"ab\x00".as_slice() >= high.as_slice());
        assert_eq!(display_name(b"a/b\xff"), "a/b\\xff");
        assert_eq!(hex_literal(b"a/\xff"), "X'612FFF'");
        let text = format!(
            "UPDATE t SET owner = 1 WHERE name = {}",
            hex_literal(b"k\x00")
        );
        assert_eq!(name_in_text(&text), Some(b"k\x00".to_vec()));
        assert_eq!(name_in_text("X'6'"), None);
    }

    #[test]
    fn table_names_reject_anything_but_identifiers() {
        for good in ["locks", "_x", "Locks_2", &"a".repeat(64)] {
            assert!(TableName::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1locks",
            "locks; DROP TABLE x",
            "a`b",
            "a.b",
            "lock-s",
            "é",
            &"a".repeat(65),
            "a b",
            "a\0",
        ] {
            assert!(
                matches!(TableName::new(bad), Err(LockError::Config { .. })),
                "{bad:?}"
            );
        }
    }
}
