//! `version_cas`: the row persists and its `fence` column is the version.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the same
//! statement, so every holder's token exceeds every earlier holder's. Release
//! clears `owner` but keeps the row, so the fence never resets. In steady state a
//! cycle is two statements: the CAS and the release (the row insert runs only
//! when the CAS found no row).

use crate::error::DbError;
use crate::lock::{Inner, MySqlHandle};
use crate::name::{new_owner, row_name};
use crate::poll::{Attempt, BoxFuture, Contender, acquire_polling};
use crate::pool::Conn;
use crate::sql::{HELD_FLAG, Statements};
use distlock_core::LockError;
use distlock_core::backend::{AcquireRequest, Acquired, Ownership};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The smallest ttl: below it a lease would spend most of its life in round trips.
pub(crate) const MIN_TTL: Duration = Duration::from_millis(10);

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;

pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    req: &AcquireRequest<'_>,
) -> Result<Acquired<MySqlHandle>, LockError> {
    let row = row_name(req.key);
    let owner = new_owner();
    let undo = sqlx::query(inner.sql.cas_abandon.clone())
        .bind(row.clone())
        .bind(owner.clone());
    let contender = Cas {
        sql: inner.sql.clone(),
        row: row.clone(),
        owner: owner.clone(),
        ttl: Inner::micros(req.ttl),
    };
    acquire_polling(inner, req, row, owner, undo, contender).await
}

struct Cas {
    sql: Statements,
    row: Vec<u8>,
    owner: String,
    ttl: u64,
}

impl Contender for Cas {
    fn attempt<'a>(&'a mut self, conn: &'a mut Conn) -> BoxFuture<'a, Result<Attempt, DbError>> {
        Box::pin(self.cas(conn))
    }
}

impl Cas {
    async fn cas(&self, conn: &mut Conn) -> Result<Attempt, DbError> {
        for _ in 0..ROW_INSERTS {
            let sent_at = Instant::now();
            let cas = sqlx::query(self.sql.cas_acquire.clone())
                .bind(self.owner.clone())
                .bind(self.ttl)
                .bind(self.row.clone());
            let done = conn.execute(cas).await?;
            match done.last_insert_id() {
                0 => {
                    // No row yet: create it (fence seeded from the server clock) and CAS again.
                    let insert =
                        sqlx::query(self.sql.cas_insert_row.clone()).bind(self.row.clone());
                    conn.execute(insert).await?;
                }
                id if id & HELD_FLAG != 0 => {
                    return Ok(Attempt::Held {
                        remaining: Duration::from_micros(id & !HELD_FLAG),
                    });
                }
                token if done.rows_affected() == 1 => return Ok(Attempt::Won { token, sent_at }),
                token => {
                    return Err(DbError::Protocol(format!(
                        "the CAS returned token {token} but matched {} rows",
                        done.rows_affected()
                    )));
                }
            }
        }
        Ok(Attempt::Held {
            remaining: Duration::ZERO,
        })
    }
}

pub(crate) async fn renew(
    inner: &Inner,
    handle: &MySqlHandle,
    ttl: Duration,
) -> Result<Ownership, LockError> {
    let renew = sqlx::query(inner.sql.cas_renew.clone())
        .bind(Inner::micros(ttl))
        .bind(handle.row.clone())
        .bind(handle.owner.clone())
        .bind(handle.fence);
    compare_owner(inner, renew).await
}

pub(crate) async fn release(inner: &Inner, handle: &MySqlHandle) -> Result<Ownership, LockError> {
    let release = sqlx::query(inner.sql.cas_release.clone())
        .bind(handle.row.clone())
        .bind(handle.owner.clone())
        .bind(handle.fence);
    compare_owner(inner, release).await
}

/// Runs a compare-owner `UPDATE`/`DELETE`: one matched row means it was ours.
pub(crate) async fn compare_owner(
    inner: &Inner,
    statement: crate::pool::Statement,
) -> Result<Ownership, LockError> {
    let outcome = async {
        let mut conn = inner.pool.get().await?;
        conn.execute(statement).await
    };
    match outcome.await.map_err(|e| inner.error(e))?.rows_affected() {
        0 => Ok(Ownership::NotHeld),
        _ => Ok(Ownership::Held),
    }
}
