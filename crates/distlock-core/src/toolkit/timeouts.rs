//! The two waits every adapter has, with one name each in every URL.

use super::LockUrl;
use crate::LockError;
use std::time::Duration;

/// How long an adapter waits for a connection, and for one reply: the
/// `connect_timeout` and `timeout` parameters of every lock URL.
///
/// ```
/// use distlock_core::toolkit::{LockUrl, Timeouts};
/// use std::time::Duration;
/// let defaults = Timeouts::new(Duration::from_secs(5), Duration::from_secs(2));
/// let mut url = LockUrl::parse("etcd", "etcd://h?timeout=250ms")?;
/// let timeouts = defaults.read(&mut url)?;
/// assert_eq!(timeouts.connect, Duration::from_secs(5));
/// assert_eq!(timeouts.reply, Duration::from_millis(250));
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The longest wait for a connection to open (`connect_timeout`).
    pub connect: Duration,
    /// The longest wait for one reply (`timeout`).
    pub reply: Duration,
}

impl Timeouts {
    /// Both waits.
    pub const fn new(connect: Duration, reply: Duration) -> Self {
        Timeouts { connect, reply }
    }

    /// Takes `connect_timeout` and `timeout` from `url`, keeping these values
    /// where the URL has none. The old per-backend spellings (`request_timeout`,
    /// `response_timeout`, `node_timeout`) are refused with the new name.
    pub fn read(self, url: &mut LockUrl) -> Result<Self, LockError> {
        for old in ["request_timeout", "response_timeout", "node_timeout"] {
            url.renamed(old, "timeout")?;
        }
        Ok(Timeouts {
            connect: url.duration("connect_timeout")?.unwrap_or(self.connect),
            reply: url.duration("timeout")?.unwrap_or(self.reply),
        })
    }

    /// Refuses a zero wait: a timeout of zero would fail every request.
    pub fn validate(&self, backend: &'static str) -> Result<(), LockError> {
        if self.connect.is_zero() || self.reply.is_zero() {
            return Err(LockError::config(
                backend,
                "timeouts must be more than zero; use a few seconds",
            ));
        }
        Ok(())
    }
}
