//! Reaching PostgreSQL through a transaction-pooling proxy (PgBouncer
//! `pool_mode = transaction`): the `pooler` setting, what it changes, and the
//! refusals of what cannot work through one (the errors that give such a
//! proxy away when the setting is missing are worded in `error`).
//!
//! Through such a proxy a client connection is a server connection only for
//! one transaction, so nothing may outlive one: prepared statements (each
//! statement then runs unprepared, in a transaction of its own: see
//! distlock-sql's `pool`), a session advisory lock (refused), and `LISTEN`
//! (waiters poll, or listen on a direct connection, `listen_at`). sqlx's
//! `extra_float_digits` start-up parameter, which PgBouncer refuses unless
//! told to ignore it, is not sent.

use crate::protocol::Strategy;
use distlock_core::LockError;
use std::str::FromStr;

/// What lies between the client and PostgreSQL, set with
/// [`PostgresConfig::pooler`](crate::PostgresConfig::pooler) or `?pooler=` in
/// the URL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooler {
    /// Nothing that shares server sessions between clients (`pooler=none`,
    /// the default): a direct connection, or a proxy in session pooling mode.
    #[default]
    None,
    /// A proxy that hands out a server connection per transaction, such as
    /// PgBouncer with `pool_mode = transaction` (`pooler=transaction`). The
    /// client then keeps no session state: statements are not prepared (each
    /// runs in a transaction of its own), the `advisory` strategy is refused,
    /// and waiters poll instead of `LISTEN`ing, unless `listen_at` names a
    /// direct connection to listen on.
    Transaction,
}

impl Pooler {
    /// Every value's name, as `?pooler=` takes it.
    pub(crate) const NAMES: &'static [&'static str] = &["none", "transaction"];
}

impl FromStr for Pooler {
    type Err = LockError;

    fn from_str(text: &str) -> Result<Self, LockError> {
        match text {
            "none" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(LockError::config(
                crate::error::BACKEND,
                format!("unknown pooler `{other}`; expected none or transaction"),
            )),
        }
    }
}

/// Refuses what cannot work through `pooler`.
pub(crate) fn check(pooler: Pooler, strategy: Strategy) -> Result<(), LockError> {
    if pooler == Pooler::Transaction && strategy == Strategy::Advisory {
        return Err(LockError::config(
            crate::error::BACKEND,
            "strategy=advisory holds a session-level advisory lock, which a transaction-pooling \
             proxy hands to other clients' transactions the moment the locking statement ends; \
             through pooler=transaction use strategy=version_cas (the default), or connect \
             advisory directly to the server",
        ));
    }
    Ok(())
}

/// Refuses the fenced store through `pooler`: sqlx's pool under it keeps
/// prepared statements on server connections the proxy shares.
pub(crate) fn check_store(pooler: Pooler) -> Result<(), LockError> {
    if pooler == Pooler::Transaction {
        return Err(LockError::config(
            crate::error::BACKEND,
            "the PostgreSQL fenced store keeps prepared statements on its connections, which a \
             transaction-pooling proxy shares between clients; give the store a URL of the \
             server itself (without pooler=transaction)",
        ));
    }
    Ok(())
}

/// The reason to give when the listener's own notification never came back:
/// `LISTEN` went through a transaction-pooling proxy.
pub(crate) fn deaf_listener(endpoint: &str, waited: std::time::Duration) -> LockError {
    LockError::config(
        crate::error::BACKEND,
        format!(
            "the LISTEN connection to {endpoint} did not get a notification sent to it within \
             {waited:?}: a transaction-pooling proxy (PgBouncer pool_mode=transaction) drops \
             LISTEN between transactions; add pooler=transaction to the URL (waiters then poll, \
             or set listen_at=HOST:PORT of the server itself), or connect directly"
        ),
    )
}
