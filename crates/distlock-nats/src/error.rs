//! async-nats errors mapped to [`LockError`]s that name the servers and what
//! to do next. Credentials never reach the client's server list (they go in its
//! connect options), so no message built here can carry one.

use distlock_core::LockError;
use distlock_core::toolkit::with_causes;
use std::sync::Arc;

/// The backend name in errors.
pub(crate) const BACKEND: &str = "nats";

/// Where the client talks to, `host:port,host:port`, and the bucket: what every
/// error that is not the caller's fault names.
#[derive(Clone)]
pub(crate) struct Servers(Arc<str>);

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl Servers {
    pub(crate) fn new(text: String) -> Self {
        Servers(Arc::from(text))
    }

    /// The servers did not answer `what`, or the connection broke.
    pub(crate) fn unavailable(
        &self,
        what: &str,
        error: &(dyn std::error::Error + 'static),
    ) -> LockError {
        LockError::Unavailable {
            backend: BACKEND,
            endpoint: self.0.to_string(),
            source: with_causes(&format!("{what}: {error}"), error.source()).into(),
        }
    }

    /// The server refused `what` for a reason retrying will not change.
    pub(crate) fn refused(&self, what: &str, why: impl std::fmt::Display) -> LockError {
        LockError::backend(BACKEND, format!("{what} at {}: {why}", self.0))
    }
}

/// What became of a compare-and-set write.
#[derive(Debug)]
pub(crate) enum Written<T = u64> {
    /// Applied at this revision (stream sequence).
    At(T),
    /// Refused: the key's last revision was not the one expected.
    Conflict,
    /// No answer we can trust: the write may or may not have been applied, so
    /// the caller reads the key and compares the owner.
    Unknown(LockError),
}
