//! The resource-side half of fencing.
//!
//! A lock alone cannot stop a holder that paused past its lease from writing. The
//! protected store can: it remembers the highest token it has admitted per
//! resource and refuses writes that carry a lower one.
//!
//! The check and the write must be **one atomic step on the store**. A check
//! followed by a separate write is not safe: a stale holder passes the check,
//! pauses, a newer holder checks and writes, then the stale holder's write lands
//! on top. So the primary operation is the fenced write, [`Fence::write`]:
//! (resource, token, write), applied by the store only if `token` is at least the
//! highest it admitted for `resource`, and refused with
//! [`LockError::StaleToken`] otherwise. Equal tokens are admitted: one holder may
//! write many times.
//!
//! Implementations: [`MemoryFence`] here; `RedisFence` (one Lua script per write)
//! in `distlock-redis`; `SqlFence` (check-and-record inside the caller's own SQL
//! transaction, where the row lock makes the split form safe) in `distlock-sql`.

mod memory;

pub use memory::MemoryFence;

use crate::{FencingToken, LockError};
use async_trait::async_trait;
use std::time::Duration;

/// A store that applies a write and its token check in one atomic step.
///
/// Object safe: `Arc<dyn Fence>` lets an application (or `distlock demo`) swap
/// the store behind its fenced writes the way `connect` swaps lock backends.
#[async_trait]
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// Applies `write` to `resource` if `token` is at least the highest token
    /// admitted for `resource`, and records `token` as the highest, in one
    /// atomic step. A lower token is refused with [`LockError::StaleToken`] and
    /// nothing changes. A store that cannot be reached gives
    /// [`LockError::Unavailable`]; when the request may have reached it before
    /// the connection failed or the reply timed out, the write may have been
    /// applied (the error says so): read the resource before trying again.
    ///
    /// A bad resource name or payload is refused here, before any store sees
    /// it; stores implement [`Fence::apply`].
    async fn write(
        &self,
        resource: &str,
        token: FencingToken,
        write: FencedWrite,
    ) -> Result<WriteOutcome, LockError> {
        validate_resource(resource)?;
        write.validate()?;
        self.apply(CheckedWrite {
            resource,
            token,
            write,
        })
        .await
    }

    /// The store's half of [`Fence::write`]: the token check and the write in
    /// one atomic step, on a resource name and a write that passed their
    /// checks. Applications call [`Fence::write`].
    async fn apply(&self, checked: CheckedWrite<'_>) -> Result<WriteOutcome, LockError>;

    /// The resource's current value (a counter reads as its decimal text), or
    /// `None` when it has none. For hashes, see the store's own API.
    async fn read(&self, resource: &str) -> Result<Option<String>, LockError>;

    /// The highest token admitted for `resource`, or `None` before the first
    /// fenced write.
    async fn highest(&self, resource: &str) -> Result<Option<FencingToken>, LockError>;

    /// Runs `statement`, in the store's own query language, only if `token`
    /// is admitted for `resource`, in the same transaction as the admission;
    /// returns the rows it affected. Only SQL stores run statements (see
    /// [`Fence::run`]); the others refuse with [`LockError::InvalidWrite`].
    async fn execute(
        &self,
        resource: &str,
        token: FencingToken,
        statement: &str,
    ) -> Result<u64, LockError> {
        validate_resource(resource)?;
        if statement.len() > FencedWrite::MAX_PAYLOAD {
            return Err(invalid_write(format!(
                "the statement is {} bytes, the limit is {} bytes",
                statement.len(),
                FencedWrite::MAX_PAYLOAD
            )));
        }
        self.run(CheckedStatement {
            resource,
            token,
            statement,
        })
        .await
    }

    /// The store's half of [`Fence::execute`], on a resource name and a
    /// statement that passed their checks. The default refuses: only SQL
    /// stores run statements.
    async fn run(&self, checked: CheckedStatement<'_>) -> Result<u64, LockError> {
        let _ = checked;
        Err(invalid_write(
            "this store runs no statements; a fenced statement needs a mysql:// or \
             postgres:// store"
                .into(),
        ))
    }

    /// Settings of the store that can make it forget admitted tokens (no
    /// persistence, evictable records, asynchronous failover), each a sentence
    /// saying what to change. `distlock check --store` prints them.
    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        Ok(Vec::new())
    }
}

/// A fenced write whose resource name and payload passed their checks, as
/// [`Fence::write`] hands it to the store's [`Fence::apply`].
#[derive(Debug)]
#[non_exhaustive]
pub struct CheckedWrite<'a> {
    /// The resource, a valid name.
    pub resource: &'a str,
    /// The token to check.
    pub token: FencingToken,
    /// The write, within its limits.
    pub write: FencedWrite,
}

/// A fenced statement whose resource name and size passed their checks, as
/// [`Fence::execute`] hands it to the store's [`Fence::run`].
#[derive(Debug)]
#[non_exhaustive]
pub struct CheckedStatement<'a> {
    /// The resource, a valid name.
    pub resource: &'a str,
    /// The token to check.
    pub token: FencingToken,
    /// The statement, in the store's query language.
    pub statement: &'a str,
}

/// One write a [`Fence`] applies together with its token check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// Sets the resource's value, expiring after `expire` if given.
    Set {
        /// The new value.
        value: String,
        /// When the value expires (never, if `None`). Only the value expires; the
        /// fence's record of the highest token never does.
        expire: Option<Duration>,
    },
    /// Deletes the resource's value (the token record stays).
    Delete,
    /// Adds `delta` (negative to subtract) to the resource's integer value, a
    /// missing value counting as 0. With a `floor`, a result below it is not
    /// written and the outcome is [`WriteOutcome::BelowFloor`]: "take one if at
    /// least one is left" answers "sold out" distinctly from "stale".
    Add {
        /// The amount to add.
        delta: i64,
        /// The lowest value the result may have.
        floor: Option<i64>,
    },
    /// Sets one field of the resource's hash.
    HashSet {
        /// The field.
        field: String,
        /// Its new value.
        value: String,
    },
}

impl FencedWrite {
    /// The largest value, field or script argument a fenced write carries, in
    /// bytes. A larger payload belongs in a blob store, with its address fenced.
    pub const MAX_PAYLOAD: usize = 1024 * 1024;

    /// Sets the value, with no expiry.
    pub fn set(value: impl Into<String>) -> Self {
        FencedWrite::Set {
            value: value.into(),
            expire: None,
        }
    }

    /// Sets the value, expiring after `expire`.
    pub fn set_expiring(value: impl Into<String>, expire: Duration) -> Self {
        FencedWrite::Set {
            value: value.into(),
            expire: Some(expire),
        }
    }

    /// Adds `delta` with no floor.
    pub fn add(delta: i64) -> Self {
        FencedWrite::Add { delta, floor: None }
    }

    /// Adds `delta` unless the result would drop below `floor`.
    pub fn add_with_floor(delta: i64, floor: i64) -> Self {
        FencedWrite::Add {
            delta,
            floor: Some(floor),
        }
    }

    /// Sets `field` of the hash to `value`.
    pub fn hash_set(field: impl Into<String>, value: impl Into<String>) -> Self {
        FencedWrite::HashSet {
            field: field.into(),
            value: value.into(),
        }
    }

    /// Refuses what no store should be sent: oversized payloads and an expiry
    /// of zero (which would delete the value at once).
    pub fn validate(&self) -> Result<(), LockError> {
        let too_long = |what: &str, len: usize| {
            (len > Self::MAX_PAYLOAD).then(|| {
                invalid_write(format!(
                    "the {what} is {len} bytes, the limit is {} bytes; store large data \
                     elsewhere and fence a reference to it",
                    Self::MAX_PAYLOAD
                ))
            })
        };
        let problem = match self {
            FencedWrite::Set { expire, .. } if expire.is_some_and(|e| e.as_millis() == 0) => {
                Some(invalid_write(
                    "the expiry is under 1 ms, which would delete the value at once; \
                     use FencedWrite::Delete or a longer expiry"
                        .into(),
                ))
            }
            FencedWrite::Set { value, .. } => too_long("value", value.len()),
            FencedWrite::HashSet { field, value } => {
                too_long("field", field.len()).or_else(|| too_long("value", value.len()))
            }
            FencedWrite::Delete | FencedWrite::Add { .. } => None,
        };
        problem.map_or(Ok(()), Err)
    }
}

/// What an admitted [`FencedWrite`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// The write was applied.
    Written,
    /// An [`FencedWrite::Add`] was applied; the value after it.
    Counter(i64),
    /// An [`FencedWrite::Add`] would have gone below its floor and was not
    /// applied; the value is unchanged at `current`. The token was admitted
    /// (and recorded): the writer is the current holder, the store is just out.
    BelowFloor {
        /// The value, unchanged.
        current: i64,
    },
}

/// Checks a fenced resource name: the same rules as a [`crate::LockKey`] (1 to
/// 512 bytes of UTF-8, no NUL or control characters), refused with
/// [`LockError::InvalidKey`].
pub fn validate_resource(resource: &str) -> Result<(), LockError> {
    match crate::key::name_problem(resource, "fenced resource") {
        Some(reason) => Err(LockError::InvalidKey { reason }),
        None => Ok(()),
    }
}

/// The outcome of [`FencedWrite::Add`] on `current`, for a store that does the
/// arithmetic itself: [`WriteOutcome::Counter`] with the value to write,
/// [`WriteOutcome::BelowFloor`] (write nothing), or an overflow refused.
pub fn add_outcome(
    resource: &str,
    current: i64,
    delta: i64,
    floor: Option<i64>,
) -> Result<WriteOutcome, LockError> {
    let next = current.checked_add(delta).ok_or_else(|| {
        invalid_write(format!(
            "adding {delta} to {current} in `{resource}` overflows a 64-bit integer"
        ))
    })?;
    Ok(match floor {
        Some(floor) if next < floor => WriteOutcome::BelowFloor { current },
        _ => WriteOutcome::Counter(next),
    })
}

/// A [`LockError::InvalidWrite`].
pub fn invalid_write(reason: String) -> LockError {
    LockError::InvalidWrite { reason }
}

/// The refusal of a stale write.
pub fn stale(resource: &str, token: FencingToken, highest: FencingToken) -> LockError {
    LockError::StaleToken {
        resource: resource.to_owned(),
        token,
        highest,
    }
}
