//! What benchmarks ask beyond the operator's view: each strategy's statements
//! for one uncontended cycle with nothing around them (no lease, no undo, no
//! polling; the doorbell's statements, which waiters need, included), the
//! floor a lock cycle is compared with, and the server's own
//! count of the statements it ran (`Questions`).
//!
//! `for_update` runs its floor on the holder connections (autocommit off).

use crate::backend::Table;
use crate::error::DbError;
use crate::keys::row_name;
use crate::protocol::{END_TRANSACTION, Strategy};
use crate::unique_insert::Insert;
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Floor;
use distlock_core::{HolderMeta, LockKey};
use distlock_sql::poll::floor_cycle;
use sqlx::Row;
use std::time::{Duration, Instant};

/// Statements the server ran for clients, this `SHOW` included.
const QUESTIONS: &str = "SHOW GLOBAL STATUS LIKE 'Questions'";

impl Strategy {
    /// What [`Table::floor_cycle`] sends for this strategy, in statements:
    /// with the doorbell's, which a cycle cannot skip.
    pub(crate) fn floor(self) -> Floor {
        let (name, requests) = match self {
            Strategy::VersionCas => (
                "bell wait + CAS UPDATE + answer, release UPDATE + bell give-back",
                5,
            ),
            Strategy::UniqueInsert => (
                "bell wait, INSERT + counter bump, DELETE + bell give-back",
                5,
            ),
            Strategy::ForUpdate => ("locking UPDATE + counter raise + ROLLBACK", 3),
        };
        Floor { name, requests }
    }
}

impl Table {
    /// One attempt of a polling strategy and its release, on one connection.
    /// `Ok(false)` when the row was held.
    pub(crate) async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<bool, DbError> {
        match self.strategy {
            Strategy::VersionCas => self.cas.floor_cycle(self, key, ttl).await,
            Strategy::UniqueInsert => {
                floor_cycle(self, &Insert::default(), &Insert::rows(self), key, ttl).await
            }
            Strategy::ForUpdate => self.for_update_floor_cycle(key).await.map(|()| true),
        }
    }

    /// `Questions`: every statement clients sent the server so far.
    pub(crate) async fn questions(&self) -> Result<u64, DbError> {
        let mut conn = self.pool.get().await?;
        let row = conn.fetch_one(sqlx::query(QUESTIONS)).await?;
        let value: String = row.try_get(1).map_err(DbError::Sql)?;
        value
            .parse()
            .map_err(|_| DbError::Protocol(format!("Questions is {value:?}")))
    }

    /// `for_update`'s: the locking `UPDATE` on a holder connection, the counter
    /// raise on an autocommit one, and the `ROLLBACK` that frees the row, as a
    /// lock cycle sends them. A held row is waited for (InnoDB's queue, up to
    /// the session's lock wait timeout), so give it a key nobody holds.
    async fn for_update_floor_cycle(&self, key: &LockKey) -> Result<(), DbError> {
        let (table, row) = (self, row_name(key));
        let limit = self.holders.timeout();
        // Dropped on an error inside a transaction, it is closed, not pooled,
        // and the server rolls back.
        let mut conn = self.holders.get().await?;
        let lock_row = || {
            table
                .sql
                .lock_row(&row, &HolderMeta::this_process().encode())
        };
        let locked = conn.execute_text(lock_row(), limit).await?;
        if locked.rows_affected() == 0 {
            // The row's first use: create it committed, as an acquire does.
            let insert = sqlx::query(table.sql.for_update_insert_row.clone()).bind(&*row);
            table.pool.get().await?.execute(insert).await?;
            conn.execute_text(lock_row(), limit).await?;
        }
        let until = WaitUntil::Deadline(Instant::now() + limit);
        let mut other = table.pool.get().await?;
        table
            .raise_counter(&mut other, &row, Duration::ZERO, until)
            .await?;
        conn.execute(sqlx::query(END_TRANSACTION)).await?;
        conn.holds_nothing();
        Ok(())
    }
}
