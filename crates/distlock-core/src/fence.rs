//! The resource-side half of fencing.
//!
//! A lock alone cannot stop a holder that paused past its lease from writing. The
//! protected resource can: it remembers the highest token it has accepted per
//! resource and refuses writes that carry a lower one. Any store with an atomic
//! compare-and-set can do this; keep `highest_token` next to the data and write
//! only `WHERE highest_token <= :token`, in the same atomic step as the write.

use crate::{FencingToken, LockError};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// A resource-side token check.
#[async_trait]
pub trait Fence: Send + Sync {
    /// Accepts `token` if it is at least the highest seen for `resource` and
    /// records it; refuses lower tokens with [`LockError::StaleToken`]. Equal
    /// tokens are accepted: one holder may write many times.
    async fn check_and_record(&self, resource: &str, token: FencingToken) -> Result<(), LockError>;
}

/// A fence in process memory, for tests, demos and single-process resources.
///
/// ```
/// use distlock_core::{Fence, FencingToken, MemoryFence};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fence = MemoryFence::new();
/// fence.check_and_record("stock", FencingToken::new(7)).await.unwrap();
/// assert!(fence.check_and_record("stock", FencingToken::new(6)).await.is_err());
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryFence {
    highest: Mutex<HashMap<String, FencingToken>>,
}

impl MemoryFence {
    /// An empty fence.
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<FencingToken> {
        self.lock().get(resource).copied()
    }

    /// Checks `token` and, only if it passes, runs `write` in the same critical
    /// section, so no stale writer can slip in between check and write.
    pub fn write_with<T>(
        &self,
        resource: &str,
        token: FencingToken,
        write: impl FnOnce() -> T,
    ) -> Result<T, LockError> {
        let mut highest = self.lock();
        Self::admit(&mut highest, resource, token)?;
        Ok(write())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, FencingToken>> {
        self.highest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn admit(
        highest: &mut HashMap<String, FencingToken>,
        resource: &str,
        token: FencingToken,
    ) -> Result<(), LockError> {
        match highest.get(resource) {
            Some(&seen) if token < seen => Err(LockError::StaleToken {
                resource: resource.to_owned(),
                token,
                highest: seen,
            }),
            _ => {
                highest.insert(resource.to_owned(), token);
                Ok(())
            }
        }
    }
}

#[async_trait]
impl Fence for MemoryFence {
    async fn check_and_record(&self, resource: &str, token: FencingToken) -> Result<(), LockError> {
        Self::admit(&mut self.lock(), resource, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lower_tokens_are_refused_equal_and_higher_accepted() {
        let fence = MemoryFence::new();
        let t = FencingToken::new;
        fence.check_and_record("r", t(5)).await.unwrap();
        fence.check_and_record("r", t(5)).await.unwrap();
        match fence.check_and_record("r", t(4)).await {
            Err(LockError::StaleToken { token, highest, .. }) => {
                assert_eq!((token, highest), (t(4), t(5)));
            }
            other => panic!("expected StaleToken, got {other:?}"),
        }
        fence.check_and_record("r", t(9)).await.unwrap();
        assert_eq!(fence.highest("r"), Some(t(9)));
        // Resources are independent.
        fence.check_and_record("other", t(1)).await.unwrap();
    }

    #[test]
    fn stale_write_does_not_run() {
        let fence = MemoryFence::new();
        let mut writes = 0;
        fence
            .write_with("r", FencingToken::new(2), || writes += 1)
            .unwrap();
        assert!(
            fence
                .write_with("r", FencingToken::new(1), || writes += 1)
                .is_err()
        );
        assert_eq!(writes, 1);
    }
}
