//! Redis adapters for distlock: [`RedisLock`] on one server, [`Redlock`] over N
//! independent ones.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey};
//! use distlock_redis::RedisConfig;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = RedisConfig::from_url("redis://127.0.0.1:6379/0?namespace=shop:&timeout=2s")?
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
//! - [`RedisLock`]: one Redis server, or the primary that Sentinel names
//!   (`redis+sentinel://s1,s2,s3/<master-name>`), followed across failovers.
//!   Or a Redis Cluster (`redis+cluster://n1,n2,n3`): each lock on its slot's
//!   primary, waiters woken by sharded pub/sub.
//!   Acquire is one round trip (a Lua script
//!   does `SET key owner NX PX ttl` and `INCR`s a fence counter kept `state_ttl`
//!   past the lease); renew and release are compare-owner scripts; waiters wake through
//!   pub/sub on one shared subscriber connection per client.
//! - On the same connection, `lock.semaphore()` ([`RedisSemaphore`]: numbered,
//!   expiring permits) and `lock.rwlock()` ([`RedisRwLock`]: expiring read
//!   shares, one writer, served in arrival order), each step one Lua script;
//!   and with `fair=true` ([`RedisConfig::fair`]) the lock serves waiters in
//!   arrival order.
//! - [`Redlock`]: N independent servers, a majority with validity, and a fencing
//!   token kept rising by a fence round (see [`RedlockConfig`]).
//! - Both offer [`distlock_core::toolkit::Inspect`] through `lock.inspect()`: the
//!   holder of a key, residue, an operator's force-unlock, deployment warnings
//!   (eviction, replicas, persistence) and `PING`.
//! - [`RedisFence`]: the resource side of fencing on Redis ([`distlock_core::Fence`]):
//!   each fenced write (set, delete, add with a floor, hash field, or a user
//!   [`FenceScript`]) is one Lua script that checks the writer's token against
//!   the highest one admitted for the key, records it, and writes, in one round
//!   trip. Built by [`RedisConfig::connect_fence`] from the same URL.
//!
//! # Guarantees and failure modes
//!
//! - Tokens strictly increase per key on one server. A name's keys, fence
//!   counters included, expire once it has been idle (no lease, nobody
//!   waiting) for [`RedisConfig::state_ttl`] (24 h unless set), so state stays
//!   bounded by the names used recently. A counter collected that way starts
//!   again above the namespace's high-water key, which every grant raises and
//!   which never expires: tokens keep rising whatever the clock does. A
//!   restart that loses the high-water too re-seeds from the server clock in
//!   microseconds, so tokens keep rising as long as that clock does not step
//!   back ([`distlock_core::TokenDurability::ServerClock`]).
//! - With replicas, failover can lose both the lock and the counter
//!   (replication is asynchronous): a second holder and a lower token become
//!   possible. [`RedisConfig::wait_for_replicas`] narrows that window (an
//!   acquire the replicas did not acknowledge fails and is undone); use etcd or
//!   ZooKeeper when correctness must survive failover.
//! - A server that cannot be reached makes renewals fail; the lease is lost at
//!   its local deadline, before the server can expire the key.
//! - A server that restarts and forgets the lock (no persistence) or is replaced
//!   by a failover is noticed as soon as the client reconnects to it (its
//!   `run_id` changed): every lease it granted (a lock, a semaphore permit, a
//!   read-write lock share) is checked at once and fires `lost()` if it is
//!   gone. Without persistence the restarted server grants them again at once;
//!   [`RedisConfig::restart_guard`] makes it refuse locks, permits and shares
//!   until no lease from before can still be believed held, and
//!   `Inspect::pitfalls` warns when persistence is off without a guard.
//! - Keys are `<namespace>{<name>}`, `…:fence` and the channel `…:ch`, all in one
//!   Redis Cluster slot (plus `<namespace>restart-guard` with a guard, and
//!   the high-water `<namespace>high-water`, one per slot in a Cluster); see
//!   [`LockKeys`] for the exact names.
//!
//! # Modules
//!
//! `config` reads URLs and builds clients; `backend` is the lock on one server,
//! `protocol` its Lua scripts (`scripts/*.lua`, with the token helpers
//! `scripts/token_lib.lua` every script that grants or keeps a token starts
//! with) and commands, `state` how long a name's counters outlive its leases
//! (`state_ttl`) and the high-water they restart above, `address` where
//! a deployment is and how to log in (one server, Sentinels, cluster seeds),
//! `command` the command connection's two shapes (one server, a cluster),
//! `connection` the reconnecting command connection, `sentinel` where it
//! connects to (a fixed server or the primary Sentinel names), `cluster` the
//! Redis Cluster connections, `primaries` the servers a question about every
//! key goes to, `replicas` the `WAIT` a lock may ask for, `subscriber` the
//! shared pub/sub wake-up,
//! `restart` the restart check of held leases and the restart guard's client
//! half (its script half, `scripts/restart_guard.lua`, is prepended to every
//! acquire script it checks);
//! `fair` the FIFO lock's wait (its scripts in `protocol/fair.rs`); `shares`
//! the expiring shares of the semaphore and read-write lock
//! (`scripts/share_*.lua`, `semaphore_acquire.lua`, `rwlock_*.lua`);
//! `fence` the fenced writes and their scripts (`scripts/fence_*.lua`);
//! `keys`, `error` and `inspect` as in every adapter; `redlock` the same shape
//! again over N servers, plus its concurrent rounds and vote tally.
#![deny(missing_docs)]

mod address;
mod backend;
mod cluster;
mod command;
mod config;
mod connection;
mod error;
mod fair;
mod fence;
mod inspect;
mod keys;
mod primaries;
mod protocol;
mod redlock;
mod registration;
mod replicas;
mod restart;
mod sentinel;
mod shares;
mod state;
mod subscriber;
mod tls;

pub use backend::{RedisBackend, RedisHandle, RedisLock};
pub use config::RedisConfig;
pub use fence::{FenceScript, RedisFence};
pub use keys::{DEFAULT_NAMESPACE, LockKeys};
/// The `redis` crate this adapter is built with: build the client you give
/// [`RedisConfig::from_client`] with it, so the types match.
pub use redis;
pub use redlock::backend::{Redlock, RedlockBackend, RedlockHandle};
pub use redlock::config::RedlockConfig;
pub use registration::{REDIS, REDLOCK};
pub use replicas::ReplicaAck;
pub use shares::RedisShare;
pub use shares::rwlock::{RedisRwLock, RedisRwLockBackend};
pub use shares::semaphore::{RedisSemaphore, RedisSemaphoreBackend};
