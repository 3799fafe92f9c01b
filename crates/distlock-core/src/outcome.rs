//! How one acquire ended, named the same by the span, the client's counters
//! and the `metrics` feature.

use crate::LockError;

/// How one acquire ended: the `outcome` of the `distlock.acquire` span and
/// the label of `distlock_acquire_total` (which also counts `reentered`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    Timeout,
    Error,
    /// The caller dropped the acquire future before it finished.
    Cancelled,
}

impl Outcome {
    pub fn of<T>(result: &Result<T, LockError>) -> Self {
        match result {
            Ok(_) => Outcome::Acquired,
            Err(LockError::Busy { .. }) => Outcome::Busy,
            Err(LockError::Timeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}
