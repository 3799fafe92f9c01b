//! The adapter toolkit: what every adapter needs and none keeps a private copy
//! of.
//!
//! - [`LockUrl`]: the one URL grammar, with typed parameter getters, unknown
//!   parameters refused and secrets redacted ([`redact`] for text that does not
//!   parse).
//! - [`parse_duration`]: `250ms`, `30s`, `5m`, everywhere.
//! - [`Backoff`]: jittered, exponential, capped pauses for every retry and poll
//!   loop.
//! - [`CancelGuard`]: undoes a half-done acquire when its future is dropped.
//! - [`Inspect`]: who holds a key, residue under a prefix, an operator's
//!   deletion; used by the CLI and by the conformance suite's fault hooks.
//! - [`Timeouts`]: `connect_timeout` and `timeout`, the two waits of every
//!   adapter.
//! - [`check_state_ttl`], [`DEFAULT_STATE_TTL`], [`MIN_STATE_TTL`]: the
//!   `state_ttl` every scheme takes, with one default and one minimum.
//! - [`sql_identifier_problem`]: table and column names checked before any SQL
//!   adapter splices them into a statement.
//! - [`random_owner`]: an owner value no other acquisition shares.
//! - [`with_causes`]: an error's message with the causes it does not quote.

mod backoff;
mod cancel;
mod duration;
mod sql;
mod state_ttl;
mod timeouts;
mod url;

pub use crate::inspect::{Floor, Holder, Inspect};
pub use backoff::Backoff;
pub use cancel::{CancelGuard, UndoFuture};
pub use duration::parse_duration;
pub use sql::{SQL_IDENTIFIER_MAX, sql_identifier_problem};
pub use state_ttl::{DEFAULT_STATE_TTL, MIN_STATE_TTL, check_state_ttl};
pub use timeouts::Timeouts;
pub use url::{Host, LockUrl, redact};

/// A fresh 128-bit random owner value in hex: what an adapter stores as the
/// holder of one acquisition, so that release and renew compare it and can never
/// touch another acquisition's lock.
pub fn random_owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// `message`, then each error of the `cause` chain whose text it does not
/// already quote, `: `-separated: a transport error's own text often hides why
/// it failed (refused, reset, no route).
pub fn with_causes(message: &str, mut cause: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = message.to_owned();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}
