//! Locks taken inside the caller's own transaction ([`TxLock::lock_in`]): a
//! locking read (`SELECT … FOR UPDATE`) of the name's row in a `for_update`
//! table, which InnoDB holds until that transaction commits or rolls back (or
//! its connection dies); no lease, no renewal. (`GET_LOCK` would not do: it
//! belongs to the session, not the transaction.)
//!
//! Invariants:
//! - The row exists before the caller's transaction reads it (inserted by
//!   this client's own autocommit connection), so the read always locks a
//!   row, never a gap two transactions could both lock (and then deadlock
//!   inserting it). The insert is tried only when a plain read finds no row:
//!   an `INSERT IGNORE` of an existing row waits for its holder. Before
//!   that read, the name's counter is stamped with now, so no collection of
//!   idle names (see `counter`) deletes the row in between; should the read
//!   in the caller's transaction still find none (this call paused for
//!   longer than `state_ttl`), it fails, and nothing is held.
//! - The token is raised on this client's own connection, outside the
//!   caller's transaction, on the name's counter row (not the locked row) once
//!   the lock is held: a rollback never takes it back, so the next holder's
//!   is higher.
//! - The row and counter are `for_update`'s, so a `lock_in` holder and a
//!   `for_update` lease of the same name exclude each other and share one
//!   token sequence. Nothing is written in the caller's transaction.

use crate::backend::Table;
use crate::error::DbError;
use crate::keys::{counter_name, row_name};
use distlock_core::adapter::WaitUntil;
use distlock_core::{FencingToken, LockError, LockKey};
use distlock_sql::table::run_settled;
use sqlx::{MySql, Transaction};
use std::time::{Duration, Instant};

/// Takes locks inside transactions of the caller's own (see
/// [`TxLock::lock_in`]). Made by [`MySqlConfig::connect_tx_lock`](crate::MySqlConfig::connect_tx_lock).
#[derive(Debug)]
pub struct TxLock {
    table: Table,
}

impl TxLock {
    pub(crate) fn new(table: Table) -> Self {
        TxLock { table }
    }

    /// Locks `key` inside `tx` and returns its fencing token; the lock is held
    /// until `tx` commits or rolls back (or its connection closes), and never
    /// expires before. Waits as long as InnoDB lets the transaction wait for a
    /// row lock (`innodb_lock_wait_timeout`, 50 s by default; a refusal is a
    /// [`LockError::Backend`] and, as MySQL does, ends only the statement).
    ///
    /// Excludes other `lock_in` holders and `for_update` leases of the same
    /// name (the other strategies' locks are another kind of lock). Taking the
    /// same name twice in one transaction succeeds again, with a new token.
    ///
    /// ```no_run
    /// use distlock_core::LockKey;
    /// use distlock_mysql::MySqlConfig;
    /// # async fn run(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let locks = MySqlConfig::from_url("mysql://app:secret@127.0.0.1:3306/app")?
    ///     .connect_tx_lock()
    ///     .await?;
    /// let mut tx = pool.begin().await?;
    /// let token = locks.lock_in(&mut tx, &LockKey::new("billing/nightly")?).await?;
    /// sqlx::query("UPDATE invoices SET run_token = ? WHERE run = 'nightly'")
    ///     .bind(token.get())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?; // frees the lock
    /// # Ok(()) }
    /// ```
    pub async fn lock_in(
        &self,
        tx: &mut Transaction<'_, MySql>,
        key: &LockKey,
    ) -> Result<FencingToken, LockError> {
        let table = &self.table;
        let row = row_name(key);
        let touch = || sqlx::query(table.sql.counter_touch.clone()).bind(counter_name(&row));
        table.run_settled(touch).await?;
        let exists = sqlx::query(table.sql.tx_row_exists.clone()).bind(&*row);
        if table.pool.fetch_all(exists).await?.is_empty() {
            let insert = || sqlx::query(table.sql.for_update_insert_row.clone()).bind(&*row);
            run_settled(&table.pool, insert)
                .await
                .map_err(|e| table.error(e))?;
        }
        let lock = sqlx::query(table.sql.tx_lock_row.clone()).bind(&*row);
        let locked = lock.fetch_optional(&mut **tx).await;
        if locked.map_err(|e| table.error(DbError::Sql(e)))?.is_none() {
            return Err(table.error(DbError::Protocol(format!(
                "the row of `{key}` was collected as idle while lock_in ran (it paused for longer \
                 than state_ttl): nothing is locked; roll the transaction back and try again"
            ))));
        }
        let until = WaitUntil::Deadline(Instant::now() + table.pool.timeout());
        let bumped = async {
            let mut conn = table.pool.get().await?;
            table
                .raise_counter(&mut conn, &row, Duration::ZERO, until)
                .await
        };
        let token = bumped.await.map_err(|e| table.error(e))?;
        Ok(FencingToken::new(token))
    }
}
