//! PostgreSQL adapter for distlock: a version-column CAS row (default) or a
//! session-level advisory lock, fencing tokens from a counter that never
//! resets, and waiters woken by `LISTEN/NOTIFY` or queued on the server.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockKey};
//! use distlock_postgres::PostgresConfig;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = PostgresConfig::from_url("postgres://app:secret@127.0.0.1:5432/app?timeout=2s")?
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
//! Chosen with [`PostgresConfig::strategy`] or `?strategy=` in the URL; each
//! table belongs to one strategy (recorded in the table comment, checked at
//! connect).
//!
//! - [`Strategy::VersionCas`] (default): the row `(namespace, name)` persists.
//!   Acquire is one `UPDATE … RETURNING fence` on a free or expired row that
//!   raises `fence`, so the token arrives in the same round trip; expiry is
//!   judged by the server clock (`now()`). Release clears the owner, keeps the
//!   row, and notifies waiters in the same statement when one marked the name
//!   (a shared advisory lock its client's listening connection holds while it
//!   waits). Two statements per uncontended cycle.
//! - [`Strategy::Advisory`]: an advisory lock on a connection of its own,
//!   with a 64-bit key hashed from namespace and name ([`advisory_key`]);
//!   the same statement bumps the name's counter row once the lock is held.
//!   The lock dies with the session: the server ends a session idle for 1.5
//!   × ttl (`idle_session_timeout`), and a keepalive every ttl/3 notices a
//!   dead session and fires `lost()`. Two names whose keys collide are
//!   detected (the row records its key, unique) and the second is refused.
//!   Waiters wait in the server's lock queue (`pg_advisory_lock` under a
//!   `lock_timeout`), so a release hands the lock over on the server and
//!   notifies nobody; a waiter whose acquire is dropped has its session
//!   ended, which takes it out of the queue.
//!
//! `version_cas` waiters wake on the release's `NOTIFY` (one listening
//! connection per client) and also poll with a jittered backoff capped at
//! 250 ms, since a notification can be lost.
//!
//! # Semaphores and read-write locks
//!
//! A `version_cas` client also offers `lock.semaphore()` and `lock.rwlock()`,
//! the same as MySQL's: expiring share rows in the tables `{table}_sem` and
//! `{table}_rw` under a head row per name that holds the token counter (and a
//! semaphore's limit); one transaction that locks the head takes a share, and
//! a read-write lock's waiters keep places in arrival order, so a waiting
//! writer holds back later readers. Waiters wake on the release's `NOTIFY`
//! and also poll. `advisory` offers neither (see its capabilities).
//!
//! # Guarantees and failure modes
//!
//! - Tokens strictly increase per name across holders, expiry takeovers,
//!   crashes and server restarts (the rows are ordinary durable rows). A
//!   deleted row is re-created with its fence seeded from the server clock in
//!   microseconds.
//! - The server is a single point of failure; with asynchronous replication a
//!   failover can lose recent acquisitions and counter values, and advisory
//!   locks (which live in the primary's memory) are all gone after one.
//! - Through a transaction-pooling proxy (PgBouncer `pool_mode=transaction`)
//!   set `pooler=transaction` ([`Pooler`]): statements are not prepared and
//!   each runs in a transaction of its own, `advisory` is refused, and
//!   waiters poll unless `listen_at` names the server itself to `LISTEN` on.
//!   Without the setting, `connect` fails with the setting named.
//!
//! See `docs/backends/postgres.md` for the exact SQL and how to choose.
//!
//! # Modules
//!
//! `config` (URL and settings) → `lock` (the strategy choice: core's
//! `BackendLock` over one of the strategies, as a `DynLock`) → the
//! strategies, each its own `Backend`: `version_cas` is distlock-sql's
//! (written once for MySQL and PostgreSQL, with its SQL in distlock-sql's
//! `src/sql/postgres/cas_*.sql`, waiting on this crate's `NOTIFY` wake-ups),
//! `advisory` (its part of distlock-sql's session-held `HeldLock`) →
//! `backend` (the lock table they share, and what distlock-sql's code
//! written once gets from it: namespace and name as the key, the session
//! ending, wake-ups) → `ending` (ending a cut-off session by pid and start) →
//! `pool` (connections, each knowing its `session`), `wake` (LISTEN/NOTIFY),
//! `pooler` (a transaction-pooling proxy: the setting and the errors that
//! show one)
//! → `protocol` (the SQL, in `sql/`) → `keys` (row layout, advisory keys),
//! `error`. `inspect` implements `Inspect` on the
//! table. The semaphore and read-write lock are distlock-sql's too (their
//! SQL in its `src/sql/postgres/shares_*.sql`), on the lock table's
//! connections and wake-ups.
#![deny(missing_docs)]

mod advisory;
mod backend;
mod config;
mod counter;
mod ending;
mod error;
mod in_tx;
mod inspect;
mod keys;
mod lock;
mod pool;
mod pooler;
mod protocol;
mod registration;
mod session;
mod wake;

pub use config::PostgresConfig;
pub use in_tx::TxLock;
pub use keys::{DEFAULT_NAMESPACE, TableName, advisory_key};
pub use pooler::Pooler;
pub use protocol::Strategy;
pub use registration::POSTGRES;
pub use sqlx::postgres::{PgConnectOptions, PgSslMode};
