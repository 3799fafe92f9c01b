//! `state_ttl`, the one setting of bounded per-name state every scheme takes:
//! how long a name's state (token counters, limits, queue bookkeeping) may
//! outlive its last lease.

use crate::LockError;
use std::time::Duration;

/// How long idle state is kept when the URL does not say: long enough that
/// nobody notices.
pub const DEFAULT_STATE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest `state_ttl` accepted: collection is for idle names, and state
/// that expires within a retried reply's round trip would only churn.
pub const MIN_STATE_TTL: Duration = Duration::from_secs(2);

/// Refuses a `state_ttl` below [`MIN_STATE_TTL`], saying what it is.
///
/// ```
/// use distlock_core::toolkit::{DEFAULT_STATE_TTL, check_state_ttl};
/// use std::time::Duration;
/// assert!(check_state_ttl("etcd", DEFAULT_STATE_TTL).is_ok());
/// let error = check_state_ttl("etcd", Duration::from_secs(1)).unwrap_err();
/// assert!(error.to_string().contains("state_ttl=2s or more"));
/// ```
pub fn check_state_ttl(backend: &'static str, state_ttl: Duration) -> Result<(), LockError> {
    if state_ttl < MIN_STATE_TTL {
        return Err(LockError::config(
            backend,
            format!(
                "state_ttl {state_ttl:?} is below the minimum {MIN_STATE_TTL:?}: it is how long a \
                 name's state (token counters, limits, queue bookkeeping) may outlive its last \
                 lease; set state_ttl=2s or more (the default is 24h)"
            ),
        ));
    }
    Ok(())
}
