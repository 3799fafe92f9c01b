//! etcd adapter for distlock: etcd's own lock protocol (a lease plus a
//! create-revision queue), with the holder key's create revision as fencing token.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
//! use distlock_etcd::EtcdConfig;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = EtcdConfig::from_url("etcd://etcd-1:2379,etcd-2:2379,etcd-3:2379/billing/")?
//!     .connect()
//!     .await?;
//! let key = LockKey::new("invoice-run")?;
//! let opts = AcquireOptions::new()
//!     .ttl(Duration::from_secs(10))
//!     .wait(Wait::For(Duration::from_secs(30)));
//! let lease = lock.acquire(&key, &opts).await?;
//! // Send lease.token() with every write the lock protects.
//! println!("holding {} with token {}", lease.key(), lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Protocol
//!
//! A lock's queue is the key range `namespace + escape(name) + "/"`
//! ([`queue_prefix`]). A contender puts `queue + <lease id hex>`, attached to its
//! client's lease, and reads the oldest key of the queue in the same transaction
//! (one RPC). The key with the lowest create revision holds the lock. A waiter
//! watches only the key just before its own, so a release wakes exactly one waiter.
//! It watches from the current revision (etcd serves a watch from a passed
//! revision on a sweep, up to 100 ms late) and re-reads the queue once etcd has
//! created the watch, so no deletion is missed; after waking it re-reads the queue
//! and its own key and checks its lease before it claims the lock. The fencing
//! token is the key's create revision. An uncontended acquire and release cost two
//! RPCs (the transaction and a compare-and-delete); the lease is granted once per
//! client and ttl and kept alive every ttl/3 on one stream, and all watches share
//! one stream.
//!
//! Apart from escaping `/` and `%` in names ([`escape_name`]), this is the layout of
//! etcd's Go `concurrency.Mutex` and of `etcdctl lock NAME`: under the same
//! namespace (`""` for `etcdctl lock`), names without `/` or `%` contend with them.
//!
//! # Failure modes
//!
//! - **Lease per client and ttl.** All locks one client holds with one ttl share a
//!   lease. If the client loses contact with etcd for a whole ttl, the lease expires
//!   and every one of those locks is lost together; `lost()` fires on each.
//! - **Abandoned locks** (`Lease::abandon`, or a drop without a runtime) stay until
//!   the ttl runs out after the client's other locks on the same lease end: the
//!   lease is then no longer kept alive and takes no new keys.
//! - **Leader change.** A new leader extends every lease's remaining ttl (by about
//!   an election timeout); it never shortens one, so the client's local deadline
//!   stays on the safe side. Requests fail fast while there is no leader.
//! - **Partition.** Renewals fail, `lost()` fires at the local deadline, which is
//!   before etcd can expire the lease; a waiter cut off for a ttl gets an error.
//! - **Minimum ttl.** Leases have whole-second ttls, and etcd raises any grant below
//!   1.5 × its election timeout (2 s with defaults). `connect` learns that minimum and
//!   [`Capabilities::min_ttl`](distlock_core::Capabilities::min_ttl) reports it, so
//!   shorter ttls are rejected with `InvalidOptions`, never silently lengthened.
//!
//! # Inspection
//!
//! `lock.inspect()` reads the same layout for operators: the holder (the queue's
//! oldest key, with its token and lease time-to-live), the keys left under a name
//! prefix, a force-unlock that deletes the holder's key, deployment pitfalls, a
//! linearizable `Get` as the raw round trip, and for benchmarks the protocol's
//! floor (a put-if-absent transaction on the client's lease, then a delete) and
//! the requests every member has received (its gRPC metrics).
//!
//! # Modules
//!
//! `config` (URL and builder, `connect`), `backend` (the `Backend` impl, the
//! protocol's steps in order), `protocol` (each etcd transaction), `queue` (one
//! contender's key and its cleanup), `etcd_lease` (etcd's leases and their keep-alive),
//! `watch` (the shared watch stream and the held key's loss watch), `rpc`
//! (timeouts and retries of one request), `keys` (key layout and escaping),
//! `error` (client errors as `LockError`s), `inspect` (the operator's view),
//! `requests` (the members' request counters), `election`, `rwlock` and
//! `semaphore` (the other primitives), `tls` (feature `tls`), and `client`, the
//! small etcd v3 gRPC client all of them talk through (tonic with hand-written
//! prost messages: no build script, no `protoc`).
#![deny(missing_docs)]

mod backend;
#[doc(hidden)]
pub mod client;
mod config;
mod election;
mod error;
mod etcd_lease;
mod inspect;
mod keys;
mod protocol;
mod queue;
mod registration;
mod requests;
mod rpc;
mod rwlock;
mod semaphore;
#[cfg(feature = "tls")]
mod tls;
mod watch;

pub use backend::{EtcdBackend, EtcdHandle, EtcdLock, EtcdStats};
pub use config::{DEFAULT_NAMESPACE, EtcdConfig};
pub use election::EtcdElection;
pub use keys::{escape_name, queue_prefix, rwlock_prefix, semaphore_prefix};
pub use registration::ETCD;
pub use rwlock::{EtcdRwLock, EtcdRwLockBackend};
pub use semaphore::{EtcdSemaphore, EtcdSemaphoreBackend};
#[cfg(feature = "tls")]
pub use tls::EtcdTls;
/// The `tonic` this adapter is built with: build the channel you give
/// [`EtcdConfig::from_channel`] with it, so the types match.
pub use tonic;
