//! ZooKeeper adapter for distlock: Apache Curator's lock recipe, with the znode's
//! creation zxid as the fencing token.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey};
//! use distlock_zookeeper::ZkConfig;
//! use std::time::Duration;
//! # #[tokio::main]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = ZkConfig::from_url("zk://zk1:2181,zk2:2181,zk3:2181/prod")?.connect().await?;
//! let key = LockKey::new("billing/nightly")?;
//! let lease = lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10))).await?;
//! println!("holding {} with fencing token {}", lease.key(), lease.token());
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! # What it guarantees
//!
//! - **Layout.** A lock is the directory `/{namespace}/{escaped name}` (container
//!   nodes, removed by the server once empty); every holder and waiter owns one
//!   ephemeral-sequential node in it named `_c_{uuid}-lock-{sequence}`, as Curator's
//!   protected mode names them, so Curator's `InterProcessMutex` on the same path
//!   contends with this adapter. See [`keys`].
//! - **Order.** The holder is the first node in sequence order; waiters are served
//!   first come, first served, each watching only the node just before its own: a
//!   release wakes one waiter, whatever the queue length.
//! - **Token.** The fencing token is the node's `czxid`, the zxid of the
//!   transaction that created it. zxids only grow, across directory recreation
//!   and server restarts, unlike the sequence, which restarts with the directory.
//! - **Sessions.** A node lives as long as its session. Each distinct ttl gets its
//!   own session whose timeout is that ttl (or one session, if
//!   [`ZkConfig::session_timeout`] is set), so a crashed or paused holder loses the
//!   lock after its ttl. The ttl must be a timeout the server grants
//!   (`minSessionTimeout..=maxSessionTimeout`, by default 2 to 20 ticks);
//!   [`distlock_core::Capabilities::min_ttl`] reports the server's minimum.
//! - **Primitives.** [`distlock_core::DistributedLock::semaphore`], `election`
//!   and `rwlock` follow Curator's `InterProcessSemaphoreV2`, `LeaderLatch` and
//!   `InterProcessReadWriteLock` under `/{namespace}/%semaphore`, `%election`
//!   and `%rw` ([`ZkSemaphore`], [`ZkElection`], [`ZkRwLock`]); their nodes are
//!   held, renewed and lost like lock nodes, and fenced by their `czxid`.
//! - **Renewal** checks, with one `exists`, that the node is still ours and the
//!   session alive; the session itself is kept alive by the client's pings.
//!
//! # Failure modes
//!
//! - *Nothing listens*: when every server refuses the TCP connection, `connect()`
//!   fails with [`distlock_core::LockError::Unavailable`] at once (a wrong port,
//!   a server not deployed). A server that accepts but does not answer yet, or
//!   is slow, and a refusal on any later session of a client that has connected
//!   before (a server restarting), are waited out until
//!   the connect timeout ([`ZkConfig::timeouts`]), as Curator does.
//! - *Session expiry* (network partition, long pause): the server deletes the
//!   node; `lost()` fires when the client learns it, and by then the lease's local
//!   deadline has already passed. A waiter whose session expires gets an error.
//! - *Disconnected, session alive*: renewals fail, and the lease stays held only
//!   until its local deadline. The client library doubles its pause between
//!   reconnect attempts without a cap, so it may come back about as long after
//!   a server returns as the outage lasted: keep ttls well above outages.
//! - *Lost create reply*: the client finds its node by its uuid after reconnecting
//!   instead of leaving an orphan that would block the lock.
//! - *Operator deletes the node*: the next renewal (every ttl/3) reports it and
//!   `lost()` fires.
//! - *GC pause or SIGSTOP past the ttl*: the session expires and someone else gets
//!   the lock while the paused process still believes it holds it. Only fencing
//!   closes that hole: pass [`distlock_core::Lease::token`] with every write.
//!
//! # Modules
//!
//! Dependencies point one way: `config` → `semaphore` (with `permit_node`, a
//! permit's slot and limit), `election`, `rwlock` → `backend` → `queue` (the
//! wait in line, for every recipe's node kind) → `session` (the pooled
//! sessions) and `protocol` (the znode requests) → [`keys`] (paths and
//! escaping), `error`; `session` opens TLS sessions
//! through `tls` ([`ZkTls`], feature `tls`). `inspect` implements
//! [`distlock_core::toolkit::Inspect`] for the backend (holder, residue, an
//! operator's deletion, `distlock check`'s warnings) over the same requests.
#![deny(missing_docs)]

mod backend;
mod config;
mod election;
mod error;
mod inspect;
pub mod keys;
mod permit_node;
mod protocol;
mod queue;
mod registration;
mod rwlock;
mod semaphore;
mod session;
mod tls;

pub use backend::{ZkBackend, ZkHandle, ZkLock};
pub use config::{AclPolicy, AppClient, DigestAuth, ZkConfig};
pub use election::ZkElection;
pub use registration::ZOOKEEPER;
pub use rwlock::{ZkRwLock, ZkRwLockBackend};
pub use semaphore::{ZkSemaphore, ZkSemaphoreBackend};
pub use tls::ZkTls;
/// The `zookeeper-client` this adapter is built with: connect the client you
/// give [`ZkConfig::from_client`] with it, so the types match.
pub use zookeeper_client;
