//! `version_cas`: the row persists and its `fence` column is the version.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the same
//! statement, so every holder's token exceeds every earlier holder's. Release
//! clears `owner` but keeps the row, so the fence never resets. In steady state a
//! cycle is two statements: the CAS and the release (the row insert runs only
//! when the CAS found no row).

use crate::backend::Table;
use crate::error::DbError;
use crate::poll::{Attempt, Bid, BoxFuture, Contender};
use crate::pool::Conn;
use crate::protocol::{HELD_FLAG, Statements};
use std::time::{Duration, Instant};

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;

/// `version_cas`'s attempts: the CAS, inserting the row first when it has
/// none.
#[derive(Default)]
pub(crate) struct Cas;

impl Contender for Cas {
    fn attempt<'a>(
        &'a mut self,
        table: &'a Table,
        bid: &'a Bid,
        conn: &'a mut Conn,
    ) -> BoxFuture<'a, Result<Attempt, DbError>> {
        Box::pin(cas(&table.sql, bid, conn))
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
