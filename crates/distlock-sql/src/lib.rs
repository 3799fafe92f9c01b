//! Fencing-token checks inside your own sqlx transaction (MySQL and MariaDB
//! with InnoDB, and PostgreSQL).
//!
//! A lock alone cannot stop a holder that paused past its lease from writing;
//! the store it writes to can, if it refuses writes whose fencing token is
//! lower than one it already admitted. That check protects the store only if
//! it and the write are **one atomic step**. In SQL the transaction is that
//! step: [`SqlFence::admit`] locks the resource's fence row inside your
//! transaction, compares the token and records it; your statements after it,
//! in the same transaction, commit only if the token was admitted, and the row
//! lock makes every other writer of the resource wait for your commit.
//!
//! # What it guarantees
//!
//! For each resource, the transactions that pass [`SqlFence::admit`] and
//! commit do so in non-decreasing token order: once a transaction with token
//! `t` has committed, no transaction with a token below `t` commits a write it
//! protected (its `admit` returns [`LockError::StaleToken`] and it rolls
//! back). Equal tokens are admitted, so one holder may write many times. The
//! record of the highest token lives in the database and survives restarts
//! (and is rolled back with your transaction if you roll back).
//!
//! # Use with a lease
//!
//! Any distlock backend hands out a [`FencingToken`] with its lease
//! (`lease.token()`); the fence does not care which backend made it, only that
//! tokens for one resource come from one lock.
//!
//! ```no_run
//! use distlock_core::memory::MemoryStore;
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey};
//! use distlock_sql::SqlFence;
//! use sqlx::Connection;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let lock = MemoryStore::new().client(); // or any backend's client
//! let mut conn = distlock_sql::connect("mysql://app:secret@127.0.0.1:3306/app").await?;
//! let fence = SqlFence::new();
//! fence.create_table(&mut conn).await?; // once, at setup
//!
//! let key = LockKey::new("inventory/sku-42")?;
//! let lease = lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10))).await?;
//! let mut tx = conn.begin().await?;
//! // Refused with StaleToken if a newer holder has written: `?` drops `tx`, which rolls back.
//! fence.admit(&mut tx, "inventory/sku-42", lease.token()).await?;
//! sqlx::query("UPDATE stock SET n = n - 1 WHERE sku = 42 AND n > 0")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! [`SqlFence::create_table`] creates (`distlock_fences` is the default name,
//! [`SqlFence::with_table`] picks another):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS `distlock_fences` (
//!     resource VARBINARY(512) NOT NULL,
//!     highest BIGINT UNSIGNED NOT NULL,
//!     PRIMARY KEY (resource)
//! ) ENGINE=InnoDB
//! ```
//!
//! On PostgreSQL (a `PgConnection`, or `SqlStore<sqlx::Postgres>`) the table is
//! `resource BYTEA PRIMARY KEY, highest BIGINT NOT NULL` and `admit` is
//! `INSERT … ON CONFLICT (resource) DO UPDATE SET highest = GREATEST(…)
//! RETURNING highest`, which locks the row until the transaction ends and
//! returns the stored highest (above the token: stale). The rest of this page
//! is the same on both, with PostgreSQL's deadlock (40P01), serialization
//! failure (40001) and lock timeout (55P03) as contention.
//!
//! `resource` holds the resource name's UTF-8 bytes (1 to 512, checked with
//! [`distlock_core::fence::validate_resource`]); a binary column compares
//! bytes, and 512 bytes fit every InnoDB row format's index limit (a
//! `VARCHAR(512)` in utf8mb4 would need 2048). `admit` is one statement:
//!
//! ```sql
//! INSERT INTO `distlock_fences` (resource, highest) VALUES (?, ?)
//!     ON DUPLICATE KEY UPDATE highest = IF(highest <= ?, ?, LAST_INSERT_ID(highest))
//! ```
//!
//! It inserts the row for a new resource, or takes an exclusive lock on the
//! existing row (InnoDB locks the duplicate record exclusively for
//! `ON DUPLICATE KEY UPDATE`, and only the record, not a gap), and records the
//! token if it is at least the stored one. A refusal is reported through the
//! insert id (`LAST_INSERT_ID(highest)`, never 0), since sqlx sets
//! `CLIENT_FOUND_ROWS` and the affected-row count cannot tell "inserted" from
//! "unchanged". Not used, on purpose: `SELECT … FOR UPDATE` first (on a missing
//! row it takes a gap lock, and two first writers then deadlock on their
//! inserts) and `INSERT IGNORE` then `SELECT … FOR UPDATE` (the ignored
//! duplicate takes a shared lock; two writers upgrading it deadlock).
//!
//! # Why only inside a transaction
//!
//! Check and write are two steps here; what makes them one is the row lock,
//! which lasts until the transaction ends. In autocommit mode each statement
//! is its own transaction: the lock would be gone before your write, and a
//! stale holder could pass the check, pause, and write after a newer holder.
//! So `admit` refuses a connection on which sqlx has no transaction open, and
//! your protected statements must follow it in the same transaction. On any
//! error from `admit`, roll back (dropping the sqlx `Transaction` does). A
//! deadlock (1213) or lock wait timeout (1205), from `admit` or your own
//! statements, is a transient [`LockError::Backend`] for which
//! [`is_contention`] is true: roll back and run the whole transaction again.
//!
//! # Rows that carry their own fence
//!
//! When a write touches one row of a table that can hold the token itself,
//! [`FencedRow`] does check and write in one `UPDATE … WHERE fence <= ?`, with
//! or without a transaction. It runs on MySQL and MariaDB only (the caller's
//! `?` placeholders come first, and PostgreSQL numbers its own), as does the
//! convenience [`connect`]; [`SqlFence`] and [`SqlStore`] serve both.
//!
//! # Any store with compare-and-set
//!
//! The same scheme works on any store with an atomic conditional write: keep
//! the highest token next to the data (or in a row locked with it), and make
//! every write "apply only if the stored token ≤ mine, and store mine" in one
//! step: a conditional `UPDATE`, a compare-and-set on a version, a
//! transaction, or a server-side script (as `RedisFence` does). Reading the
//! token and writing in two separate steps, without a lock held in between, is
//! never safe.
//!
//! # Errors
//!
//! Every error is a [`LockError`]: a server that cannot be reached is
//! [`LockError::Unavailable`] (its endpoint never carries credentials); a
//! refused login or a bad URL is [`LockError::Config`]; anything else the
//! server reports is [`LockError::Backend`]. [`map_error`] converts the errors
//! of your own statements the same way.
#![deny(missing_docs)]

pub mod adapter;
#[doc(hidden)]
pub mod cas;
#[doc(hidden)]
pub mod config;
mod connect;
mod db;
#[doc(hidden)]
pub mod db_error;
mod dialect;
mod error;
mod fence;
#[doc(hidden)]
pub mod held;
mod ident;
#[doc(hidden)]
pub mod poll;
#[doc(hidden)]
pub mod pool;
mod row;
#[doc(hidden)]
pub mod settle;
#[doc(hidden)]
pub mod shares;
#[doc(hidden)]
pub mod state;
mod store;
#[doc(hidden)]
pub mod table;

pub use connect::{CONNECT_TIMEOUT, connect};
pub use db::{FenceConnection, SqlDatabase};
pub use error::{is_contention, map_error};
pub use fence::SqlFence;
pub use row::FencedRow;
pub use store::SqlStore;

/// The `sqlx` this crate is built with: use it for your own statements, so the
/// connection and transaction types are the ones [`SqlFence`] takes.
pub use sqlx;

#[cfg(doc)]
use distlock_core::{FencingToken, LockError};

/// The futures can be spawned (checked at compile time).
#[cfg(test)]
mod send_check {
    #[allow(dead_code)]
    fn admit_spawns(fence: crate::SqlFence, mut conn: sqlx::MySqlConnection) {
        tokio::spawn(async move {
            let t = distlock_core::FencingToken::new(1);
            fence.admit(&mut conn, "r", t).await
        });
    }

    #[allow(dead_code)]
    fn highest_spawns(fence: crate::SqlFence, mut conn: sqlx::MySqlConnection) {
        tokio::spawn(async move { fence.highest(&mut conn, "r").await });
    }

    #[allow(dead_code)]
    fn fenced_row_spawns(row: crate::FencedRow, mut conn: sqlx::MySqlConnection, key: String) {
        tokio::spawn(async move {
            let query = sqlx::query(sqlx::AssertSqlSafe(row.update_sql("a = ?"))).bind(1_i64);
            let token = distlock_core::FencingToken::new(1);
            row.execute(&mut conn, query, key.as_str(), token).await
        });
    }

    #[allow(dead_code)]
    fn create_spawns(fence: crate::SqlFence, mut conn: sqlx::MySqlConnection) {
        tokio::spawn(async move { fence.create_table(&mut conn).await });
    }
}
