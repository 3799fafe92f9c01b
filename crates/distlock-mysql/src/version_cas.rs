//! `version_cas`: the row persists and its `fence` column is the version.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the same
//! statement, so every holder's token exceeds every earlier holder's. Release
//! clears `owner` but keeps the row, so the fence never resets. In steady state a
//! cycle is two statements: the CAS and the release (the row insert runs only
//! when the CAS found no row).

use crate::error::DbError;
use crate::poll::{Attempt, Bid, Contender, Round, held_for};
use crate::pool::Conn;
use crate::protocol::{HELD_FLAG, Statements};
use async_trait::async_trait;
use std::time::{Duration, Instant};

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;

/// `version_cas`'s attempts: the CAS, inserting the row first when it has
/// none.
#[derive(Default)]
pub(crate) struct Cas;

#[async_trait]
impl Contender for Cas {
    async fn attempt(&mut self, round: Round<'_>) -> Result<Attempt, DbError> {
        cas(&round.table.sql, round.bid, round.conn).await
    }
}

async fn cas(sql: &Statements, bid: &Bid, conn: &mut Conn) -> Result<Attempt, DbError> {
    for _ in 0..ROW_INSERTS {
        let sent_at = Instant::now();
        let cas = sqlx::query(sql.cas_acquire.clone())
            .bind(bid.owner.clone())
            .bind(bid.ttl)
            .bind(bid.row.clone());
        let done = conn.execute(cas).await?;
        match done.last_insert_id() {
            0 => {
                // No row yet: create it (fence seeded from the server clock) and CAS again.
                let insert = sqlx::query(sql.cas_insert_row.clone()).bind(bid.row.clone());
                conn.execute(insert).await?;
            }
            id if id & HELD_FLAG != 0 => return Ok(held_for(id)),
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
