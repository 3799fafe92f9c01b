//! distlock over NATS JetStream KV: one bucket per namespace, one key per lock,
//! every grant, renewal, takeover and release a compare-and-set on the key's
//! revision, the granting write's stream sequence as the fencing token, and
//! waiters woken by a KV watch.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, DistributedLock, LockKey};
//! use distlock_nats::NatsConfig;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), distlock_core::LockError> {
//! let locks = NatsConfig::from_url("nats://127.0.0.1:4222/locks")?.connect().await?;
//! let key = LockKey::new("nightly-report")?;
//! let lease = locks
//!     .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10)))
//!     .await?;
//! println!("held with token {}", lease.token());
//! lease.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The layout, the protocol and why tokens never fall are in the repository's
//! `docs/backends/nats.md`.

#![deny(missing_docs)]

mod backend;
mod config;
mod epoch;
mod error;
mod fence;
mod inspect;
mod keys;
mod listening;
mod markers;
mod protocol;
mod registration;
mod replication;
mod share_entry;
mod shares;
mod sightings;
mod signal;
mod sweep;

pub use backend::{NatsBackend, NatsHandle, NatsLock};
pub use config::NatsConfig;
pub use fence::NatsFence;
pub use keys::{DEFAULT_BUCKET, escape as escape_name};
pub use registration::NATS;
pub use shares::NatsShare;
pub use shares::rwlock::{NatsRwLock, NatsRwLockBackend};
pub use shares::semaphore::{NatsSemaphore, NatsSemaphoreBackend};
