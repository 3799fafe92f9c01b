//! Doorbells: how a release hands the lock to the next waiter where the
//! database sends no notifications (MySQL and MariaDB have no `LISTEN`).
//!
//! Every attempt of one acquire runs on one connection and first takes the
//! name's bell, a named server lock, waiting for it at most until the holder's
//! expiry (and a second at a time); a win keeps the bell on that connection
//! until the release, which gives it back in the same round trip. Waiters so
//! queue in the server's named-lock queue: a release wakes the first of them,
//! whose attempt runs right after its wait, in the same round trip, and the
//! releaser's own next attempt queues behind it. A bell decides nothing: the
//! attempt's statements alone grant the lock, so a bell taken while the row
//! is held by someone who keeps none (a lease dropped without release, an
//! expired holder taken over) only makes its taker poll the row first. Not a
//! stable API.

use crate::db::BoxFuture;
use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect};
use crate::table::Value;
use distlock_core::LockKey;
use sqlx::SqlStr;
use std::time::Duration;

/// The longest one wait on a bell lasts before the attempt runs anyway: a
/// waiter whose connection died is noticed within this and the reply timeout.
pub const LONGEST_RING: Duration = Duration::from_secs(1);

/// What one wait on a bell found, and the answer of the statement sent after it.
#[derive(Debug, Clone, Copy)]
pub struct Rung {
    /// The wait took the bell: the connection keeps it until it gives every
    /// bell back.
    pub kept: bool,
    /// How long the wait lasted, by the server's clock: the statement after
    /// it started no earlier than its send plus this.
    pub waited: Duration,
    /// That statement's insert id and matched rows (MySQL's OK packet).
    pub answer: Option<(u64, u64)>,
}

/// The bells of one lock table's names.
pub trait Doorbell<D: PoolDialect>: Send + Sync {
    /// A connection for one acquire's attempts, which may keep a bell; `None`
    /// when none is free (its attempts then poll without one).
    fn connection(&self) -> BoxFuture<'_, Option<Conn<D>>>;

    /// Waits at most `bound` to take `key`'s bell on `conn` (at once if it
    /// keeps it already), then runs `then` (a statement and its values), all
    /// in one round trip.
    fn ring<'a>(
        &'a self,
        conn: &'a mut Conn<D>,
        key: &'a LockKey,
        bound: Duration,
        then: Option<(&'a SqlStr, &'a [Value])>,
    ) -> BoxFuture<'a, Result<Rung, DbError>>;

    /// Runs `release` (a statement and its values), then gives every bell
    /// `conn` keeps back, in one round trip: the rows the statement matched.
    fn release<'a>(
        &'a self,
        conn: &'a mut Conn<D>,
        release: (&'a SqlStr, &'a [Value]),
    ) -> BoxFuture<'a, Result<u64, DbError>>;
}
