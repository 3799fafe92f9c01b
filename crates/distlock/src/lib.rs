//! Distributed locks with fencing tokens: one async API over Redis, Redlock, etcd,
//! ZooKeeper, MySQL and PostgreSQL, plus an in-process backend for tests and demos.
//!
//! ```
//! use distlock::{AcquireOptions, Fence, FencedWrite, LockKey, MemoryFence};
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! // The URL picks the backend; in production it comes from configuration,
//! // for example "redis://cache:6379" or "etcd://e1:2379,e2:2379,e3:2379/locks".
//! let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "memory://example".into());
//! let lock = distlock::connect(&url).await?;
//!
//! let key = LockKey::new("inventory/sku-42")?;
//! let lease = lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10))).await?;
//! // Hand the token to every write: the store refuses writers older than the
//! // newest it has admitted, in the same atomic step as the write (see `Fence`).
//! let fence = MemoryFence::new();
//! let write = FencedWrite::add_with_floor(-1, 0);
//! lease.guard(fence.write("sku-42", lease.token(), write)).await??;
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Picking a backend by feature
//!
//! Each backend is a Cargo feature; the in-memory backend is always there.
//!
//! | feature | URL schemes | module |
//! |---|---|---|
//! | (none) | `memory://NAME` | [`memory`] |
//! | `redis` | `redis://`, `rediss://` | `distlock::redis` (`RedisConfig`) |
//! | `redlock` | `redlock://h1,h2,h3`, `redlocks://` | `distlock::redis` (`RedlockConfig`) |
//! | `etcd` | `etcd://h1,h2/namespace`, `etcds://` | `distlock::etcd` (`EtcdConfig`) |
//! | `zookeeper` | `zk://h1,h2/chroot` | `distlock::zookeeper` (`ZkConfig`) |
//! | `mysql` | `mysql://user:pass@host/db?strategy=version_cas` | `distlock::mysql` (`MySqlConfig`) |
//! | `postgres` | `postgres://user:pass@host/db?strategy=advisory` | `distlock::postgres` (`PostgresConfig`) |
//! | `nats` | `nats://h1,h2/bucket`, `tls://` (TLS always built in) | `distlock::nats` (`NatsConfig`) |
//! | `tls` | TLS for the backends enabled: `etcds://`, ZooKeeper's `tls=true`, MySQL's `ssl-mode`/`ssl-ca`, PostgreSQL's `sslmode`/`sslrootcert` (`rediss://` needs only `redis`) | |
//! | `metrics` | acquire, hold, lease and waiter metrics through the `metrics` crate, labelled by backend (see [Metrics](#metrics)) | |
//! | `full` | all of the above | |
//!
//! ```toml
//! [dependencies]
//! distlock = { version = "0.1", features = ["redis", "etcd"] }
//! ```
//!
//! An enabled backend's module is its adapter crate, for typed configuration
//! (TLS, namespaces, timeouts) beyond what a URL says, and for backend-specific
//! calls. `connect` on a scheme whose feature is off returns
//! [`LockError::Config`] naming the feature to enable; [`BackendKind`] lists
//! the backends, their schemes and features, and which this build has.
//!
//! # Picking a backend by URL, and swapping it without code changes
//!
//! Write the application against [`DynLock`] (`Arc<dyn DistributedLock>`) and
//! take the URL from configuration. Moving from Redis to etcd is then a change of
//! URL (and of features, if the new backend's is not compiled in), not of code:
//!
//! ```
//! use distlock::{AcquireOptions, DynLock, LockError, LockKey, Wait};
//! use std::time::Duration;
//!
//! /// Application code: knows nothing about which backend runs underneath.
//! async fn run_nightly_report(lock: &DynLock) -> Result<bool, LockError> {
//!     let key = LockKey::new("reports/nightly")?;
//!     let opts = AcquireOptions::new().ttl(Duration::from_secs(30)).wait(Wait::No);
//!     let Some(lease) = lock.try_acquire(&key, &opts).await? else {
//!         return Ok(false); // another instance runs it
//!     };
//!     lease.guard(async { /* the work */ }).await?;
//!     lease.release().await?;
//!     Ok(true)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! // memory:// in unit tests, redis://... or etcd://... in production.
//! let lock = distlock::connect("memory://tests").await?;
//! assert!(run_nightly_report(&lock).await?);
//! # Ok(()) }
//! ```
//!
//! Backends differ in what they guarantee (see [`Capabilities`], and each
//! backend module's crate docs for its protocol and failure modes): code that
//! needs, say, strict fencing can check `lock.capabilities().fencing` at
//! start-up.
//!
//! # Metrics
//!
//! With the feature `metrics`, every lock client reports through the
//! [`metrics`](https://docs.rs/metrics) crate's facade to whatever recorder the
//! application installs (a Prometheus exporter, say). Every metric carries a
//! `backend` label (`redis`, `etcd`, …) and never the key: keys are user data,
//! unbounded in number and possibly sensitive.
//!
//! | metric | kind | labels | what it counts |
//! |---|---|---|---|
//! | `distlock_acquire_wait_seconds` | histogram | `backend`, `outcome` | from the start of an acquire to its outcome (`acquired`, `busy`, `timeout`, `error`, `cancelled`) |
//! | `distlock_hold_seconds` | histogram | `backend` | from acquisition to release or loss |
//! | `distlock_leases_held` | gauge | `backend` | leases held now by this process |
//! | `distlock_waiters` | gauge | `backend` | callers inside acquire now |
//! | `distlock_acquire_total` | counter | `backend`, `outcome` | acquires by outcome (`acquired`, `busy`, `timeout`, `error`, `cancelled`, `reentered`) |
//! | `distlock_renewals_total` | counter | `backend` | successful renewals |
//! | `distlock_renewal_failures_total` | counter | `backend` | failed renewal attempts, retried until the local deadline |
//! | `distlock_releases_total` | counter | `backend` | leases released by their owner |
//! | `distlock_leases_lost_total` | counter | `backend`, `reason` | leases lost, by [`LossReason`] (`expired`, `revoked`, `session_ended`, `max_hold`) |
//!
//! The crate's `examples/prometheus.rs` serves them on a Prometheus endpoint.
//!
//! # Secrets
//!
//! Passwords in URLs never appear in errors returned by [`connect`]; use
//! [`redact_url`] when you log a lock URL yourself.
#![deny(missing_docs)]

mod connect;
mod in_process;
mod kind;
mod redact;
mod store;

pub use connect::connect;
pub use distlock_core::*;
pub use in_process::{memory_fence, memory_store};
pub use kind::BackendKind;
pub use redact::redact_url;
pub use store::connect_fence;

/// The Redis adapters, `RedisLock` (feature `redis`) and `Redlock` (feature
/// `redlock`): configs, layout helpers and Lua scripts.
#[cfg(any(feature = "redis", feature = "redlock"))]
pub use distlock_redis as redis;

/// The etcd adapter (feature `etcd`).
#[cfg(feature = "etcd")]
pub use distlock_etcd as etcd;

/// The ZooKeeper adapter (feature `zookeeper`).
#[cfg(feature = "zookeeper")]
pub use distlock_zookeeper as zookeeper;

/// The MySQL / MariaDB adapter (feature `mysql`).
#[cfg(feature = "mysql")]
pub use distlock_mysql as mysql;

/// The PostgreSQL adapter (feature `postgres`).
#[cfg(feature = "postgres")]
pub use distlock_postgres as postgres;

/// The NATS JetStream KV adapter (feature `nats`).
#[cfg(feature = "nats")]
pub use distlock_nats as nats;

/// `SqlFence`, fencing tokens checked inside your own sqlx transaction, and
/// `SqlStore`, a fenced value table (feature `mysql` or `postgres`).
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub use distlock_sql as sql;
