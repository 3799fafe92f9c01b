//! One attempt on a row strategy's lock, as its strategy defines it
//! ([`Contender`]), what it binds ([`Bid`]) and finds ([`Attempt`]), and what
//! a lock held in a row keeps ([`RowHandle`]).

use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect};
use crate::table::bell::{Doorbell, Rung};
use crate::table::{LockTable, Value};
use async_trait::async_trait;
use distlock_core::LockKey;
use distlock_core::adapter::WaitUntil;
use sqlx::SqlStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one attempt found.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is ours; `sent_at` was taken before the statement that won it
    /// started on the server.
    Won {
        /// The fencing token.
        token: u64,
        /// No later than the winning statement's start.
        sent_at: Instant,
    },
    /// Someone holds it for about `remaining` more (by the server clock; zero
    /// when unknown).
    Held {
        /// Until the holder's expiry.
        remaining: Duration,
    },
}

/// What a lock held in a row keeps: the values naming its row, the owner
/// value the compare-owner statements check, the token, and the connection
/// that keeps the name's doorbell until the release gives it back.
#[derive(Debug)]
pub struct RowHandle<D: PoolDialect> {
    pub(super) key: Vec<Value>,
    pub(super) owner: Arc<str>,
    pub(super) fence: u64,
    pub(super) bell: Mutex<Option<Conn<D>>>,
}

/// What one attempt binds.
#[derive(Debug)]
pub struct Bid<'a> {
    /// The lock's name.
    pub key: &'a LockKey,
    /// The values naming its row ([`LockTable::key`]).
    pub row: Vec<Value>,
    /// Fresh per attempt: compare-owner statements never match another
    /// acquisition's row, and the background undo of a failed attempt never
    /// matches the row a later attempt of the same acquisition won.
    pub owner: Arc<str>,
    /// The holder's metadata, encoded ([`HolderMeta::encode`](distlock_core::HolderMeta::encode)).
    pub meta: Arc<str>,
    /// The ttl.
    pub ttl: Duration,
    /// Until when statements refused for row-lock contention are retried
    /// within the attempt.
    pub until: WaitUntil,
}

impl Bid<'_> {
    /// `first`, then the row's values, then `last`, in the statements' order.
    pub fn values(&self, first: &[Value], last: &[Value]) -> Vec<Value> {
        let mut values = first.to_vec();
        values.extend_from_slice(&self.row);
        values.extend_from_slice(last);
        values
    }
}

/// One contender's attempts on the lock, as its strategy defines them; one
/// clone per acquire.
#[async_trait]
pub trait Contender<A: LockTable>: Clone + Send + Sync + 'static {
    /// One attempt on `conn`. Cancel-safe: dropped at any await, the
    /// loop's undo gives back what it may have won.
    async fn attempt(
        &mut self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
    ) -> Result<Attempt, DbError>;

    /// One attempt on `conn` after waiting at most `bound` to take the name's
    /// bell there: by default the wait, then [`Contender::attempt`]; a
    /// contender whose attempt is one statement sends it with the wait.
    async fn attempt_belled(
        &mut self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
        bell: &dyn Doorbell<A::Dialect>,
        bound: Duration,
    ) -> Result<(Attempt, Rung), DbError> {
        let rung = bell.ring(conn, bid.key, bound, None).await?;
        Ok((self.attempt(table, bid, conn).await?, rung))
    }
}

/// A row strategy's owner-checked statements. Binds: `renew` the ttl in µs,
/// the row, the owner (and the token `with_fence`); `release` the row, the
/// owner (and the token); `abandon`, which frees whatever an attempt whose
/// reply never came may have won, the row and the owner.
#[derive(Debug, Clone)]
pub struct OwnerChecked {
    /// Extends a held row's expiry.
    pub renew: SqlStr,
    /// Frees a held row.
    pub release: SqlStr,
    /// Frees what an abandoned attempt may have won.
    pub abandon: SqlStr,
    /// Whether renew and release also match the token (a row that persists
    /// across holders).
    pub with_fence: bool,
}

impl OwnerChecked {
    /// The values of the statement that renews (with `ttl`) or frees
    /// `handle`'s row.
    pub(super) fn values<D: PoolDialect>(
        &self,
        ttl: Option<Duration>,
        handle: &RowHandle<D>,
    ) -> Vec<Value> {
        let ttl = ttl.map(|ttl| Value::Int(crate::table::micros(ttl)));
        let mut values: Vec<Value> = ttl.into_iter().collect();
        values.extend(handle.key.iter().cloned());
        values.push(Value::Text(handle.owner.clone()));
        if self.with_fence {
            values.push(Value::Int(handle.fence));
        }
        values
    }
}
