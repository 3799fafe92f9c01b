//! Locks taken inside the caller's own transaction ([`TxLock::lock_in`]):
//! `pg_advisory_xact_lock` on the name's advisory key, which the server frees
//! when that transaction commits or rolls back (or its connection dies); no
//! lease, no renewal.
//!
//! Invariants:
//! - The token is raised on one of this client's own connections, outside the
//!   caller's transaction, once the lock is held: a rollback undoes the
//!   caller's writes but never the token, so the next holder's is higher.
//! - The key and the counter are the `advisory` strategy's (same table, same
//!   hash, same collision check), so a `lock_in` holder and an `advisory`
//!   lease of the same name exclude each other and share one token sequence.
//! - Nothing outlives the transaction, so this works through a
//!   transaction-pooling proxy (`pooler=transaction`) too.

use crate::backend::Table;
use crate::counter::Counter;
use crate::error::DbError;
use crate::keys::advisory_key;
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use sqlx::{AssertSqlSafe, Postgres, Transaction};

/// Takes locks inside transactions of the caller's own (see
/// [`TxLock::lock_in`]). Made by [`PostgresConfig::connect_tx_lock`](crate::PostgresConfig::connect_tx_lock).
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
    /// expires before. Waits as long as the lock is held elsewhere, bounded by
    /// the transaction's own `lock_timeout` or `statement_timeout` (a refusal
    /// is a [`LockError::Backend`]; the transaction is then aborted).
    ///
    /// Excludes other `lock_in` holders and `advisory` leases of the same
    /// namespace and name (`version_cas` locks are another kind of lock).
    /// Taking the same name twice in one transaction succeeds again, with a
    /// new token.
    ///
    /// ```no_run
    /// use distlock_core::LockKey;
    /// use distlock_postgres::PostgresConfig;
    /// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let locks = PostgresConfig::from_url("postgres://app:secret@127.0.0.1:5432/app")?
    ///     .connect_tx_lock()
    ///     .await?;
    /// let mut tx = pool.begin().await?;
    /// let token = locks.lock_in(&mut tx, &LockKey::new("billing/nightly")?).await?;
    /// sqlx::query("UPDATE invoices SET run_token = $1 WHERE run = 'nightly'")
    ///     .bind(token.get() as i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?; // frees the lock
    /// # Ok(()) }
    /// ```
    pub async fn lock_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        key: &LockKey,
    ) -> Result<FencingToken, LockError> {
        let table = &self.table;
        let lock_key = advisory_key(&table.namespace, key);
        // Sent as text, with the key (an integer) in it: one exchange, and
        // nothing of it stays on the connection (a pooler's server
        // connection included). An unnamed prepared statement would cost an
        // exchange more, its parse answered before its execution.
        let lock = AssertSqlSafe(format!("SELECT pg_advisory_xact_lock({lock_key})"));
        sqlx::raw_sql(lock)
            .execute(&mut **tx)
            .await
            .map_err(|e| table.error(DbError::Sql(e)))?;
        let meta = HolderMeta::this_process().encode();
        let counter = Counter {
            key,
            lock_key,
            meta: &meta,
        };
        counter.raise(table).await
    }
}
