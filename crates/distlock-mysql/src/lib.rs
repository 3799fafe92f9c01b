//! MySQL and MariaDB adapter for distlock: locks in one InnoDB table, expiry on
//! the database clock, and a fencing token from a counter that never goes back.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockKey};
//! use distlock_mysql::MySqlConfig;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = MySqlConfig::from_url("mysql://app:secret@127.0.0.1:3306/app?strategy=version_cas&timeout=2s")?
//!     .connect()
//!     .await?;
//! let key = LockKey::new("billing/nightly")?;
//! let lease = lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(30))).await?;
//! // Pass lease.token() with every write to the protected resource.
//! println!("holding {} with token {}", lease.key(), lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Strategies
//!
//! Chosen with [`MySqlConfig::strategy`] or `?strategy=` in the URL; each table
//! belongs to one strategy (recorded in the table comment, checked at connect).
//!
//! - [`Strategy::VersionCas`] (default): the row persists. Acquire is one CAS
//!   `UPDATE` on a free or expired row that raises `fence` with
//!   `LAST_INSERT_ID(fence + 1)`, so the token arrives in the same round trip.
//!   Release clears the owner and keeps the row. Two round trips per
//!   uncontended cycle. Each attempt first takes a named server lock per name
//!   (`GET_LOCK`, its doorbell) in the same text as the CAS, and a holder keeps
//!   it until its release gives it back in the same text: waiters queue on the
//!   server, and a release hands the lock to the first of them. Where no bell
//!   is kept, they poll with jittered backoff (≤ 250 ms, never past the
//!   holder's expiry).
//! - [`Strategy::UniqueInsert`]: the row exists only while held. `INSERT`
//!   acquires, an expired row is taken over by one guarded `UPDATE`, `DELETE …
//!   WHERE owner` releases; tokens come from a counter row never deleted.
//! - [`Strategy::ForUpdate`]: a dedicated connection holds a transaction that
//!   locks the row (an `UPDATE` tagging it with the session id, rolled back on
//!   release); waiting is server-side, the lock dies with the connection (the
//!   server drops an idle holder after `wait_timeout` = ttl), and a keepalive
//!   every ttl/3 notices a dead connection and fires `lost()`. Ttls are whole
//!   seconds.
//!
//! # Semaphores, read-write locks, elections
//!
//! Every strategy also offers `semaphore()`, `rwlock()` and `election()`.
//! Elections hold the lock of the same name. Semaphores and read-write locks
//! keep expiring share rows in tables of their own, `{table}_sem` and
//! `{table}_rw`, under a head row per name that holds the token counter (and
//! a semaphore's limit); one transaction that locks the head takes a share, and
//! waiters poll. A read-write lock's waiters keep places in arrival order, so
//! readers and writers are served as they came.
//!
//! # Guarantees and failure modes
//!
//! - Expiry always compares with `NOW(6)` on the server, never the client clock.
//! - Row-lock contention (lock wait timeout 1205, deadlock 1213) is never an
//!   error: the refused statement is retried with backoff within the caller's
//!   wait, which then ends in the lock, `Timeout`, or `Busy` for `Wait::No`.
//! - Tokens strictly increase per name across holders, expiry takeovers, crashes
//!   and server restarts (InnoDB keeps the rows). A deleted row is re-created
//!   with its fence seeded from the server clock in microseconds, so tokens keep
//!   rising unless that clock steps back.
//! - The server is a single point of failure; with asynchronous replication a
//!   failover can lose recent acquisitions (and counter values).
//! - `TIMESTAMP(6)` ends in January 2038 on MySQL and MariaDB before 11.5.
//! - Names up to 254 bytes are stored verbatim; longer ones as their first 189
//!   bytes, 0x1D and their hex SHA-256.
//!
//! # The table
//!
//! `connect` creates the lock table when it is missing (see
//! [`MySqlConfig::create_table`]); `{table}` is the configured table name and
//! `{comment}` marks it as distlock's. To create it yourself:
//!
//! ```sql
#![doc = include_str!("sql/create_table.sql")]
//! ```
//!
//! Every statement the strategies send is a file in the crate's `src/sql/`,
//! one per protocol step.
//!
//! # Modules
//!
//! `config` (URL and settings) → `lock` (the strategy choice: core's
//! `BackendLock` over one of the strategies, as a `DynLock`) → the
//! strategies, each its own `Backend`: `version_cas` is distlock-sql's
//! (written once for MySQL and PostgreSQL, with its SQL in distlock-sql's
//! `src/sql/mysql/cas_*.sql`), `unique_insert` (its attempts, on
//! distlock-sql's polling loop) and `for_update` (its part of distlock-sql's
//! session-held `HeldLock`, its wait in `row_queue`) → `backend` (the lock
//! table they share, and what distlock-sql's code written once gets from it:
//! row names, `KILL` for a cut-off attempt, no wake-ups) → `pool`
//! (connections) → `protocol` (the SQL, in `sql/`) → `keys` (row layout),
//! `error`.
//! `inspect` implements `Inspect` on the table; `floor` adds the benchmarks'
//! floor (each strategy's statements with nothing around them) and the
//! server's statement count. The semaphore and read-write lock are
//! distlock-sql's too (their SQL in its `src/sql/mysql/shares_*.sql`), on the
//! lock table's connections.
#![deny(missing_docs)]

mod backend;
mod bell;
mod config;
mod counter;
mod error;
mod floor;
mod for_update;
mod in_tx;
mod inspect;
mod keys;
mod lock;
mod pool;
mod protocol;
mod registration;
mod row_queue;
mod unique_insert;

pub use config::MySqlConfig;
pub use in_tx::TxLock;
pub use keys::{NAME_COLUMN_BYTES, TableName, counter_name, row_name};
pub use protocol::Strategy;
pub use registration::MYSQL;
pub use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
