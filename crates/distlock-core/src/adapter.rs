//! For adapter authors: what a backend implements and the wrappers core puts
//! around it. Applications do not need this module; they use the traits and
//! guards at the crate root.
//!
//! - [`Backend`]: a lock's wire protocol (acquire, renew, release, loss
//!   signal); [`BackendLock`] turns it into a [`DistributedLock`](crate::DistributedLock)
//!   with validation, the lease lifecycle, reentrancy and metrics.
//! - [`SemaphoreBackend`], [`ElectionBackend`], [`RwLockBackend`]: the acquire
//!   step of each other primitive, wrapped by [`BackendSemaphore`],
//!   [`BackendElection`] and [`BackendRwLock`]. [`LockElection`] elects with
//!   any lock `Backend`; [`LockQueueRwLock`] is the read-write lock of a lock
//!   `Backend` whose queue also takes read and write requests.
//! - [`Holding`]: one acquisition reduced to renew, release and a loss signal,
//!   which every held thing's lease runs over ([`Bound`] pairs a lock backend
//!   with its handle).
//! - The request and reply types ([`AcquireRequest`], [`WaitUntil`],
//!   [`Acquired`], [`Ownership`], [`PermitRequest`], [`AcquiredPermit`],
//!   [`CampaignRequest`]), the inspection traits the CLI and the conformance
//!   suite use ([`SemaphoreInspect`], [`RwLockInspect`]; the lock's
//!   [`Inspect`](crate::toolkit::Inspect) is in [`toolkit`](crate::toolkit)
//!   with the other shared helpers), and small helpers ([`clock_drift`],
//!   [`lowest_free_slot`]).
//! - [`Registration`]: how a backend crate describes itself (name, URL
//!   schemes, example URL, how a URL connects, its fenced store) to the
//!   `distlock` facade, the CLI and the test harnesses, which walk these
//!   instead of matching on backend names; [`schemes`] holds the URL schemes
//!   of the workspace's backends, which the facade knows even without them.

pub use crate::backend::{
    AcquireRequest, Acquired, Backend, DynLeaderChanges, Holding, LeaderChanges, LossSignal,
    Ownership, WaitUntil,
};
pub use crate::election::{
    BackendElection, CampaignRequest, ElectionBackend, LockElection, MAX_PROPOSAL_LEN,
};
pub use crate::lease::{Bound, clock_drift};
pub use crate::lock::BackendLock;
pub use crate::registry::{ConnectFence, ConnectLock, Connecting, ParseUrl, Registration, schemes};
pub use crate::rwlock::{BackendRwLock, LockQueueRwLock, RwLockBackend, RwLockInspect, ShareInfo};
pub use crate::semaphore::{
    AcquiredPermit, BackendSemaphore, MAX_PERMITS, PermitInfo, PermitRequest, SemaphoreBackend,
    SemaphoreInspect, lowest_free_slot,
};
