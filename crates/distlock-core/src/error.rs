//! The one error type every adapter converts into at its boundary.

use crate::{FencingToken, HolderMeta, LockKey};
use std::time::Duration;

/// A boxed error from a client library or server, kept as the `source`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a lease stopped being held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline passed before a renewal succeeded (the backend was slow or
    /// unreachable, or renewal is manual and nobody renewed).
    Expired,
    /// The backend reports the lock gone or owned by someone else (deleted by an
    /// operator, expired on the server, taken over).
    Revoked,
    /// The backend session or lease the lock was bound to ended.
    SessionEnded,
    /// `max_hold` elapsed; the lease was released.
    MaxHoldReached,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lease expired before it could be renewed",
            LossReason::Revoked => "the backend no longer has this lock for this owner",
            LossReason::SessionEnded => "the backend session holding the lock ended",
            LossReason::MaxHoldReached => "max_hold elapsed",
        })
    }
}

/// Everything that can go wrong with a lock. Each message says what to do next.
///
/// Secrets (passwords, tokens in URLs) never appear in any variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// `Wait::No` (or `try_acquire`) found the lock held elsewhere.
    #[error(
        "lock `{key}` is held by {}; retry later or wait with Wait::For",
        holder.as_ref().map_or_else(|| "another owner".to_owned(), ToString::to_string)
    )]
    Busy {
        /// The contended key.
        key: LockKey,
        /// Who held it, read after the refusal when the holder recorded it.
        holder: Option<HolderMeta>,
    },
    /// The wait ended before the lock was acquired, or the acquire reply came too late
    /// to leave any validity.
    #[error("lock `{key}` was not acquired within {waited:?}; wait longer or check who holds it")]
    Timeout {
        /// The key that was not acquired.
        key: LockKey,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lease is no longer held; any work under it must stop.
    #[error("lease on `{key}` is lost: {reason}; stop work that relies on it and acquire again")]
    Lost {
        /// The key of the lost lease.
        key: LockKey,
        /// Why it was lost.
        reason: LossReason,
    },
    /// A fence saw a higher token than this one: the writer is a stale holder.
    #[error(
        "stale fencing token {token} for resource `{resource}` (highest seen: {highest}); \
         the writer lost its lock and must not write"
    )]
    StaleToken {
        /// The fenced resource.
        resource: String,
        /// The rejected token.
        token: FencingToken,
        /// The highest token the fence has accepted.
        highest: FencingToken,
    },
    /// The lock name is not valid.
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The acquire options are not valid for this backend.
    #[error("invalid lock options: {reason}")]
    InvalidOptions {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A fenced write was refused for what it carries (an oversized value or
    /// script, a zero expiry) or because it does not fit the stored value
    /// (adding to a non-integer, an overflow, a hash field on a string). Its
    /// token was not recorded.
    #[error("invalid fenced write: {reason}")]
    InvalidWrite {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The backend configuration (URL, struct) is not valid.
    #[error("invalid {backend} configuration: {reason}")]
    Config {
        /// The backend the configuration is for.
        backend: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The backend could not be reached.
    #[error(
        "{backend} is unavailable at {endpoint}: {source}; check that the server runs and the address is right"
    )]
    Unavailable {
        /// The backend.
        backend: &'static str,
        /// The address tried (never with credentials).
        endpoint: String,
        /// What the client library reported.
        #[source]
        source: BoxError,
    },
    /// Redlock: fewer than a majority of nodes answered.
    #[error(
        "only {answered} of {nodes} nodes answered, {needed} needed; \
         bring nodes back before retrying: {detail}"
    )]
    QuorumUnavailable {
        /// Nodes that answered.
        answered: usize,
        /// Nodes configured.
        nodes: usize,
        /// The majority.
        needed: usize,
        /// Each failed node and why.
        detail: String,
    },
    /// Clients disagree on a semaphore's number of permits: permits are held or
    /// awaited under another limit. Nothing was taken.
    #[error(
        "semaphore `{key}` is in use with {existing} permits, not {requested}; \
         every client of one semaphore must use the same limit (or use another name)"
    )]
    LimitMismatch {
        /// The semaphore.
        key: LockKey,
        /// The limit this client asked for.
        requested: u32,
        /// The limit its current holders and waiters use.
        existing: u32,
    },
    /// Any other error the backend reported.
    #[error("{backend} error: {source}")]
    Backend {
        /// The backend.
        backend: &'static str,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
}

impl LockError {
    /// Builds an [`LockError::InvalidOptions`].
    pub fn invalid_options(reason: impl Into<String>) -> Self {
        LockError::InvalidOptions {
            reason: reason.into(),
        }
    }

    /// Builds a [`LockError::Backend`] from any error.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        LockError::Backend {
            backend,
            source: source.into(),
        }
    }

    /// Builds a [`LockError::Config`].
    pub fn config(backend: &'static str, reason: impl Into<String>) -> Self {
        LockError::Config {
            backend,
            reason: reason.into(),
        }
    }

    /// An [`LockError::Unavailable`] with its endpoint and cause rewritten by
    /// `rewrite`, for context known only further up (a hint, a mask); any
    /// other error unchanged.
    #[must_use]
    pub fn map_unavailable(
        self,
        rewrite: impl FnOnce(String, BoxError) -> (String, BoxError),
    ) -> Self {
        let LockError::Unavailable {
            backend,
            endpoint,
            source,
        } = self
        else {
            return self;
        };
        let (endpoint, source) = rewrite(endpoint, source);
        LockError::Unavailable {
            backend,
            endpoint,
            source,
        }
    }

    /// True for errors that may go away on retry (network, server availability).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LockError::Unavailable { .. }
                | LockError::QuorumUnavailable { .. }
                | LockError::Backend { .. }
        )
    }
}
