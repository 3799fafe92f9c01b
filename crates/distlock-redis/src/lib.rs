//! Redis adapters for distlock.
//!
//! - [`RedisLock`]: one Redis server. Acquire is one round trip (a Lua script
//!   does `SET key owner NX PX ttl` and `INCR`s a fence counter that never
//!   expires); renew and release are compare-owner scripts; waiters wake through
//!   pub/sub on one shared subscriber connection per client.
//! - [`Redlock`]: N independent servers, a majority with validity, and a fencing
//!   token kept rising by a fence round (see [`RedlockConfig`]).
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey};
//! use distlock_redis::RedisConfig;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = RedisConfig::from_url("redis://127.0.0.1:6379/0?namespace=shop:")?
//!     .connect()
//!     .await?;
//! let key = LockKey::new("inventory/sku-42")?;
//! let lease = lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10))).await?;
//! // Pass lease.token() with every write to the protected resource.
//! println!("holding {} with token {}", lease.key(), lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees and failure modes
//!
//! - Tokens strictly increase per key on one server. A restart that loses the
//!   counter re-seeds it from the server clock in microseconds, so tokens keep
//!   rising as long as that clock does not step back
//!   ([`distlock_core::TokenDurability::ServerClock`]).
//! - With replicas, failover can lose both the lock and the counter
//!   (replication is asynchronous): a second holder and a lower token become
//!   possible. [`RedisConfig::wait_for_replicas`] narrows that window; use etcd or
//!   ZooKeeper when correctness must survive failover.
//! - A server that cannot be reached makes renewals fail; the lease is lost at
//!   its local deadline, before the server can expire the key.
//! - Keys are `<namespace>{<name>}`, `…:fence` and the channel `…:ch`, all in one
//!   Redis Cluster slot; see `docs/backends/redis.md` for the exact layout.
#![deny(missing_docs)]

mod config;
mod error;
mod keys;
mod link;
mod lock;
mod node;
pub mod scripts;
mod server;
mod subscriber;

pub use config::{RedisConfig, ReplicaAck};
pub use keys::{DEFAULT_NAMESPACE, LockKeys, lock_key_pattern};
pub use lock::{RedisBackend, RedisHandle, RedisLock};
mod redlock;

pub use redlock::config::RedlockConfig;
pub use redlock::lock::{Redlock, RedlockBackend, RedlockHandle};
