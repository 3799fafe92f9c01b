//! `unique_insert`: the row exists only while held.
//!
//! Invariant: a holder is whoever's `INSERT` created the row, or whose guarded
//! `UPDATE` replaced the owner of an expired one; the primary key makes that one
//! holder at a time. The token comes from the name's counter row, raised after
//! the lock is won. A name idle for `state_ttl` loses its counter row to the
//! sweep of a new name's counter (never while its lock row is live), and the
//! floor that sweep raises keeps its next tokens above its earlier ones.

use crate::backend::Table;
use crate::error::{DbError, code};
use crate::keys::row_name;
use crate::pool::Conn;
use async_trait::async_trait;
use distlock_sql::cas::{HELD_FLAG, held_for};
use distlock_sql::poll::{Attempt, Bid, Contender, OwnerChecked};
use distlock_sql::table::micros;
use std::time::{Duration, Instant};

/// How often one attempt flips between "row exists" and "row gone" (holders
/// coming and going) before it reports the lock as busy and backs off.
const FLIPS: usize = 4;

/// `unique_insert`'s attempts: the INSERT, or the takeover of an expired row.
#[derive(Debug, Clone, Default)]
pub(crate) struct Insert {
    /// After seeing the row held, try the takeover first: while a lock stays held,
    /// each poll is then one statement instead of a failing INSERT plus one.
    row_exists: bool,
}

impl Insert {
    /// Its owner-checked statements: the row exists only while held, so the
    /// release (a `DELETE`) is the undo of an abandoned attempt too.
    pub fn rows(table: &Table) -> OwnerChecked {
        OwnerChecked {
            renew: table.sql.unique_renew.clone(),
            release: table.sql.unique_release.clone(),
            abandon: table.sql.unique_release.clone(),
            with_fence: false,
        }
    }
}

#[async_trait]
impl Contender<Table> for Insert {
    async fn attempt(
        &mut self,
        table: &Table,
        bid: &Bid<'_>,
        conn: &mut Conn,
    ) -> Result<Attempt, DbError> {
        let sql = &table.sql;
        let (row, ttl) = (row_name(bid.key), micros(bid.ttl));
        for _ in 0..FLIPS {
            let sent_at = Instant::now();
            if !self.row_exists {
                let insert = sqlx::query(sql.unique_insert.clone())
                    .bind(&*row)
                    .bind(&*bid.owner)
                    .bind(&*bid.meta)
                    .bind(ttl);
                match conn.execute(insert).await {
                    Ok(_) => return won(table, &row, bid, conn, sent_at).await,
                    Err(e) if e.number() == Some(code::DUPLICATE_KEY) => self.row_exists = true,
                    Err(e) => return Err(e),
                }
                continue;
            }
            let takeover = sqlx::query(sql.unique_takeover.clone())
                .bind(&*bid.owner)
                .bind(&*bid.meta)
                .bind(ttl)
                .bind(&*row);
            let done = conn.execute(takeover).await?;
            match done.last_insert_id() {
                // Released since we looked: insert it.
                0 => self.row_exists = false,
                HELD_FLAG if done.rows_affected() == 1 => {
                    return won(table, &row, bid, conn, sent_at).await;
                }
                id if id & HELD_FLAG != 0 && id != HELD_FLAG => {
                    return Ok(Attempt::Held {
                        remaining: held_for(id),
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
        Ok(raced())
    }
}

/// The lock is ours: raise the name's counter for the token. If this fails, the
/// poll loop's undo deletes the row we hold.
async fn won(
    table: &Table,
    row: &[u8],
    bid: &Bid<'_>,
    conn: &mut Conn,
    sent_at: Instant,
) -> Result<Attempt, DbError> {
    let token = table
        .raise_counter(conn, row, Duration::ZERO, bid.until)
        .await?;
    Ok(Attempt::Won { token, sent_at })
}

/// Lost a race with other contenders (rows coming and going): nothing was won,
/// so the caller backs off and tries again. (A deadlock victim, such as one of
/// several `INSERT`s racing for a just-deleted row, comes back as an error the
/// poll loop retries the same way.)
fn raced() -> Attempt {
    Attempt::Held {
        remaining: Duration::ZERO,
    }
}
