//! Lock names.

use crate::LockError;
use std::sync::Arc;

/// A validated lock name: 1 to [`LockKey::MAX_LEN`] bytes of UTF-8 without NUL or
/// control characters.
///
/// Keys are opaque and case-sensitive: `a`, `A`, `a/b`, `ab` and `a/` are five
/// independent locks on every backend. `/`, `{`, `}`, `%` and spaces are allowed;
/// each adapter escapes what its backend treats specially.
///
/// ```
/// use distlock_core::LockKey;
/// let key = LockKey::new("orders/42")?;
/// assert_eq!(key.as_str(), "orders/42");
/// assert!(LockKey::new("").is_err());
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// The longest key, in bytes.
    pub const MAX_LEN: usize = 512;

    /// Validates `name` as a key.
    pub fn new(name: impl AsRef<str>) -> Result<Self, LockError> {
        let name = name.as_ref();
        match name_problem(name, "key") {
            Some(reason) => Err(LockError::InvalidKey { reason }),
            None => Ok(LockKey(Arc::from(name))),
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What is wrong with `name` as a lock key or fenced resource (`noun`), or `None`:
/// 1 to [`LockKey::MAX_LEN`] bytes without NUL or control characters.
pub(crate) fn name_problem(name: &str, noun: &str) -> Option<String> {
    if name.is_empty() {
        return Some(format!(
            "the {noun} is empty; give it a name of 1 to {} bytes",
            LockKey::MAX_LEN
        ));
    }
    if name.len() > LockKey::MAX_LEN {
        return Some(format!(
            "the {noun} is {} bytes long, the limit is {} bytes; shorten it or hash the long part",
            name.len(),
            LockKey::MAX_LEN
        ));
    }
    let (at, c) = name.char_indices().find(|(_, c)| c.is_control())?;
    Some(format!(
        "the {noun} has control character {c:?} at byte {at}; NUL and control characters are not allowed"
    ))
}

impl std::fmt::Debug for LockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for LockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for LockKey {
    type Err = LockError;
    fn from_str(s: &str) -> Result<Self, LockError> {
        LockKey::new(s)
    }
}

impl TryFrom<&str> for LockKey {
    type Error = LockError;
    fn try_from(s: &str) -> Result<Self, LockError> {
        LockKey::new(s)
    }
}

impl TryFrom<String> for LockKey {
    type Error = LockError;
    fn try_from(s: String) -> Result<Self, LockError> {
        LockKey::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(r: Result<LockKey, LockError>) -> String {
        match r {
            Err(LockError::InvalidKey { reason }) => reason,
            other => panic!("expected InvalidKey, got {other:?}"),
        }
    }

    #[test]
    fn empty_key_is_rejected() {
        assert!(reason(LockKey::new("")).contains("empty"));
    }

    #[test]
    fn nul_and_control_characters_are_rejected() {
        assert!(reason(LockKey::new("a\0b")).contains("byte 1"));
        assert!(reason(LockKey::new("a\nb")).contains("control"));
        assert!(reason(LockKey::new("\u{7f}")).contains("control"));
    }

    #[test]
    fn length_limit_is_in_bytes() {
        assert!(LockKey::new("x".repeat(512)).is_ok());
        assert!(reason(LockKey::new("x".repeat(513))).contains("513 bytes"));
        // 171 three-byte characters = 513 bytes.
        assert!(LockKey::new("€".repeat(171)).is_err());
        assert!(LockKey::new("€".repeat(170)).is_ok());
    }

    #[test]
    fn special_characters_are_allowed_and_kept_verbatim() {
        for name in ["a/b", "{x}", "%2F", "a b", "a/", "ключ", "🔒"] {
            assert_eq!(LockKey::new(name).unwrap().as_str(), name);
        }
        assert_ne!(LockKey::new("a").unwrap(), LockKey::new("A").unwrap());
    }
}
