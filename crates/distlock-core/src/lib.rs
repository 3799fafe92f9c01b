//! Core API for distlock: one async API for distributed locks, with a fencing
//! token from every backend.
//!
//! - [`DistributedLock`] is the trait applications use, usually as
//!   `Arc<dyn DistributedLock>`.
//! - [`Lease`] is the held lock: its [`FencingToken`], its local deadline, its
//!   [`Lease::lost`] signal, release and release on drop.
//! - [`DistributedLockExt`] adds [`DistributedLockExt::with_lock`] (work run
//!   under a lock) and [`DistributedLockExt::acquire_all`] (several keys, all or
//!   nothing, in a deadlock-free order) to every lock, `DynLock` included.
//! - [`Fence`] is the protected store's side: a write applied only with a
//!   token at least as high as any it admitted before, in one atomic step.
//! - [`Held`] is what every held thing shares (`is_held`, `lost`, `guard`,
//!   `renew`, `release`, `abandon`); [`SingleLease`] adds the one key and token
//!   of a lease, permit, leadership or share. Both are in [`prelude`].
//! - [`adapter`] is for adapter authors: [`adapter::Backend`] is what an
//!   adapter implements, and [`adapter::BackendLock`] turns it into a
//!   `DistributedLock` with renewal, loss, reentrancy and metrics.
//! - [`DistributedSemaphore`] hands out numbered [`Permit`]s (at most `limit`
//!   per name, each with a distinct slot); [`LeaderElection`] hands out a
//!   [`Leadership`] whose token is the term. Both are leases: same renewal,
//!   deadline and loss as the lock. [`LeaderElection::observe`] watches who
//!   leads without campaigning ([`LeaderWatch`]).
//! - [`DistributedRwLock`] hands out read and write [`RwLease`]s: readers
//!   share, a writer holds alone, waiters are served in arrival order.
//! - [`memory`] is an in-process backend for tests and demos.
//! - [`toolkit`] is what adapters share: the URL grammar, backoff, the cancel
//!   guard and the [`toolkit::Inspect`] trait.
//!
//! ```
//! use distlock_core::{AcquireOptions, DistributedLock, Fence, FencedWrite, LockKey, MemoryFence};
//! use distlock_core::memory::MemoryStore;
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock_core::LockError> {
//! let lock = MemoryStore::new().client();
//! let fence = MemoryFence::new();
//! let key = LockKey::new("inventory/sku-42")?;
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
//! let lease = lock.acquire(&key, &opts).await?;
//! // Do the work while the lease is held, and fence every write with its token:
//! // the store applies it only if no newer holder has written since.
//! let write = FencedWrite::add_with_floor(-1, 0);
//! lease
//!     .guard(fence.write("inventory/sku-42", lease.token(), write))
//!     .await??;
//! lease.release().await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod adapter;
mod backend;
mod capabilities;
mod counters;
mod election;
mod error;
mod ext;
pub mod fence;
mod held;
mod inspect;
mod key;
mod lease;
mod lock;
pub mod memory;
mod meta;
mod metrics;
mod multi;
mod observe;
mod options;
mod outcome;
mod permit;
pub mod prelude;
mod reentry;
mod registry;
mod rwlock;
mod semaphore;
mod start;
mod telemetry;
mod token;
pub mod toolkit;
mod wrapped;

pub use capabilities::{
    Capabilities, FencingGuarantee, Primitives, Support, TokenDurability, Wake,
};
pub use counters::MetricsSnapshot;
pub use election::{DynElection, LeaderElection};
pub use error::{BoxError, LockError, LossReason};
pub use ext::DistributedLockExt;
pub use fence::{Fence, FencedWrite, MemoryFence, WriteOutcome};
pub use held::{Held, SingleLease};
pub use key::LockKey;
pub use lease::{Lease, Lost};
pub use lock::{DistributedLock, DynLock};
pub use meta::HolderMeta;
pub use multi::{AnyLost, MultiLease};
pub use observe::{LeaderUpdate, LeaderWatch, OBSERVE_POLL_CAP};
pub use options::{AcquireOptions, Owner, Renewal, Wait};
pub use permit::{Leadership, Permit};
pub use rwlock::{DistributedRwLock, DynRwLock, RwLease, RwMode};
pub use semaphore::{DistributedSemaphore, DynSemaphore};
pub use token::FencingToken;

/// The attribute [`DistributedLock`], [`Fence`] and [`adapter::Backend`] are
/// written with: implement them with `#[distlock_core::async_trait]` (or
/// `#[distlock::async_trait]`) and no dependency of your own.
pub use async_trait::async_trait;
