//! `version_cas`: the row persists and its `fence` column is the version.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the same
//! statement, so every holder's token exceeds every earlier holder's. Release
//! clears `owner` but keeps the row, so the fence never resets. In steady state a
//! cycle is two statements: the CAS and the release (the row insert runs only
//! when the CAS found no row).

use crate::backend::Table;
use crate::error::{BACKEND, DbError};
use crate::poll::{Attempt, Bid, BoxFuture, Contender, RowHandle, acquire_polling, compare_row};
use crate::pool::Conn;
use crate::protocol::{HELD_FLAG, Statements};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership};
use distlock_core::toolkit::Inspect;
use distlock_core::{Capabilities, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;

/// A `version_cas` client's backend.
#[derive(Debug)]
pub(crate) struct VersionCas {
    pub table: Arc<Table>,
}

#[async_trait]
impl Backend for VersionCas {
    type Handle = RowHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RowHandle>, LockError> {
        acquire_polling(&self.table, &req, &self.table.sql.cas_abandon, Cas).await
    }

    async fn renew(&self, handle: &RowHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let sql = &self.table.sql.cas_renew;
        compare_row(&self.table, sql, Some(ttl), handle, true).await
    }

    async fn release(&self, handle: &RowHandle) -> Result<Ownership, LockError> {
        let sql = &self.table.sql.cas_release;
        compare_row(&self.table, sql, None, handle, true).await
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(&*self.table)
    }
}

/// Its attempts: the CAS, inserting the row first when it has none.
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
