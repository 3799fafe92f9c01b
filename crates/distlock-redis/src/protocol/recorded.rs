//! What one server records about a lock, read for inspection.

use super::{Command, ServerClient};
use crate::error::CommandError;
use crate::keys::LockKeys;
use std::time::Duration;

/// What one server records about a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The holder's owner value, if the lock key exists.
    pub owner: Option<String>,
    /// The lock key's remaining ttl in ms (-1: no expiry, -2: no key).
    pub pttl: i64,
    /// The fence counter, if it exists.
    pub fence: Option<u64>,
}

impl Recorded {
    /// The remaining ttl, when the key has one.
    pub fn expires_in(&self) -> Option<Duration> {
        u64::try_from(self.pttl).ok().map(Duration::from_millis)
    }
}

impl ServerClient {
    /// The lock's owner, remaining ttl and fence counter, read atomically.
    pub async fn recorded(
        &self,
        keys: &LockKeys,
        budget: Duration,
    ) -> Result<Recorded, CommandError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .get(&keys.lock)
            .pttl(&keys.lock)
            .get(&keys.fence);
        let (owner, pttl, fence) = self.query(budget, Command::Pipeline(pipe)).await?;
        Ok(Recorded { owner, pttl, fence })
    }
}
