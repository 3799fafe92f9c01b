//! `unique_insert`: the row exists only while held.
//!
//! Invariant: a holder is whoever's `INSERT` created the row, or whose guarded
//! `UPDATE` replaced the owner of an expired one; the primary key makes that one
//! holder at a time. The token comes from the name's counter row, raised after
//! the lock is won; the counter row is never deleted, so tokens never repeat.

use crate::error::{DbError, code};
use crate::lock::{Inner, MySqlHandle};
use crate::name::{counter_name, new_owner, row_name};
use crate::poll::{Attempt, BoxFuture, Contender, acquire_polling};
use crate::pool::Conn;
use crate::sql::{HELD_FLAG, Statements};
use crate::version_cas::compare_owner;
use distlock_core::LockError;
use distlock_core::backend::{AcquireRequest, Acquired, Ownership};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often one attempt flips between "row exists" and "row gone" (holders
/// coming and going) before it reports the lock as busy and backs off.
const FLIPS: usize = 4;

pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    req: &AcquireRequest<'_>,
) -> Result<Acquired<MySqlHandle>, LockError> {
    let row = row_name(req.key);
    let owner = new_owner();
    let undo = sqlx::query(inner.sql.unique_release.clone())
        .bind(row.clone())
        .bind(owner.clone());
    let contender = Insert {
        sql: inner.sql.clone(),
        row: row.clone(),
        owner: owner.clone(),
        ttl: Inner::micros(req.ttl),
        row_exists: false,
    };
    acquire_polling(inner, req, row, owner, undo, contender).await
}

struct Insert {
    sql: Statements,
    row: Vec<u8>,
    owner: String,
    ttl: u64,
    /// After seeing the row held, try the takeover first: while a lock stays held,
    /// each poll is then one statement instead of a failing INSERT plus one.
    row_exists: bool,
}

impl Contender for Insert {
    fn attempt<'a>(&'a mut self, conn: &'a mut Conn) -> BoxFuture<'a, Result<Attempt, DbError>> {
        Box::pin(self.insert_or_take_over(conn))
    }
}

impl Insert {
    async fn insert_or_take_over(&mut self, conn: &mut Conn) -> Result<Attempt, DbError> {
        for _ in 0..FLIPS {
            let sent_at = Instant::now();
            if !self.row_exists {
                let insert = sqlx::query(self.sql.unique_insert.clone())
                    .bind(self.row.clone())
                    .bind(self.owner.clone())
                    .bind(self.ttl);
                match conn.execute(insert).await {
                    Ok(_) => return won(conn, &self.sql, &self.row, sent_at).await,
                    Err(e) if e.number() == Some(code::DUPLICATE_KEY) => self.row_exists = true,
                    Err(e) => return Err(e),
                }
                continue;
            }
            let takeover = sqlx::query(self.sql.unique_takeover.clone())
                .bind(self.owner.clone())
                .bind(self.ttl)
                .bind(self.row.clone());
            let done = conn.execute(takeover).await?;
            match done.last_insert_id() {
                // Released since we looked: insert it.
                0 => self.row_exists = false,
                HELD_FLAG if done.rows_affected() == 1 => {
                    return won(conn, &self.sql, &self.row, sent_at).await;
                }
                id if id & HELD_FLAG != 0 && id != HELD_FLAG => {
                    return Ok(Attempt::Held {
                        remaining: Duration::from_micros(id & !HELD_FLAG),
                    });
                }
                id => {
                    return Err(DbError::Protocol(format!(
                        "the takeover returned {id:#x} and matched {} rows",
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

/// The lock is ours: raise the name's counter for the token. If this fails, the
/// caller's cleanup deletes the row we hold.
async fn won(
    conn: &mut Conn,
    sql: &Statements,
    row: &[u8],
    sent_at: Instant,
) -> Result<Attempt, DbError> {
    let bump = sqlx::query(sql.bump_counter.clone()).bind(counter_name(row));
    match conn.execute(bump).await?.last_insert_id() {
        token if token != 0 && token & HELD_FLAG == 0 => Ok(Attempt::Won { token, sent_at }),
        other => Err(DbError::Protocol(format!(
            "the fence counter returned {other}"
        ))),
    }
}

pub(crate) async fn renew(
    inner: &Inner,
    handle: &MySqlHandle,
    ttl: Duration,
) -> Result<Ownership, LockError> {
    let renew = sqlx::query(inner.sql.unique_renew.clone())
        .bind(Inner::micros(ttl))
        .bind(handle.row.clone())
        .bind(handle.owner.clone());
    compare_owner(inner, renew).await
}

pub(crate) async fn release(inner: &Inner, handle: &MySqlHandle) -> Result<Ownership, LockError> {
    let release = sqlx::query(inner.sql.unique_release.clone())
        .bind(handle.row.clone())
        .bind(handle.owner.clone());
    compare_owner(inner, release).await
}
