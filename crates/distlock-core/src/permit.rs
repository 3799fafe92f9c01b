//! The held semaphore permit and the held leadership: each is a [`Lease`] with
//! one more fact (the slot; nothing more for leadership), so renewal, the local
//! deadline, loss and release on drop are the lock's own, reached through
//! [`Held`](crate::Held) and [`SingleLease`].

use crate::{Lease, SingleLease};

/// One held permit of a semaphore. Keep it while you work; pass its
/// [`token`](SingleLease::token) to every fenced write and use
/// [`Permit::slot`] as your number among the holders. The rest (`is_held`,
/// `lost`, `guard`, `renew`, `release`, `abandon`) is [`Held`](crate::Held).
///
/// Dropping it stops renewal and gives the permit back in the background.
#[derive(Debug)]
pub struct Permit {
    lease: Lease,
    slot: u32,
    limit: u32,
}

impl Permit {
    pub(crate) fn new(lease: Lease, slot: u32, limit: u32) -> Self {
        Permit { lease, slot, limit }
    }

    /// This permit's number, in `0..limit`: no other live permit of the
    /// semaphore has it. A slot is reused after its permit is released or
    /// expires.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// How many permits the semaphore has.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

impl SingleLease for Permit {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn into_lease(self) -> Lease {
        self.lease
    }
}

/// Leadership of an election: held while [`is_held`](crate::Held::is_held),
/// lost when [`lost`](crate::Held::lost) fires, given up with
/// [`release`](crate::Held::release) so the next campaigner leads. Its fencing
/// [`token`](SingleLease::token) is the term: every later leader's is greater,
/// so a fence refuses a deposed leader's late writes.
///
/// Dropping it steps down in the background.
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Leadership {
    pub(crate) fn new(lease: Lease) -> Self {
        Leadership { lease }
    }
}

impl SingleLease for Leadership {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn into_lease(self) -> Lease {
        self.lease
    }
}
