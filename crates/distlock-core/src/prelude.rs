//! The traits applications call methods through, to glob-import:
//! `use distlock::prelude::*;` (or `distlock_core::prelude`).

pub use crate::{
    DistributedLock, DistributedLockExt, DistributedRwLock, DistributedSemaphore, Fence, Held,
    LeaderElection, SingleLease,
};
