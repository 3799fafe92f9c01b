//! The held semaphore permit and the held leadership: each is a [`Lease`] with
//! one more fact (the slot; the term), so renewal, the local deadline, loss and
//! release on drop are the lock's own.

use crate::{FencingToken, Lease, LockError, LockKey, Lost};
use std::future::Future;
use std::time::Duration;

/// One held permit of a semaphore. Keep it while you work; pass
/// [`Permit::token`] to every fenced write and use [`Permit::slot`] as your
/// number among the holders.
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

    /// The fencing token: strictly greater than every earlier permit's token of
    /// this semaphore.
    pub fn token(&self) -> FencingToken {
        self.lease.token()
    }

    /// The semaphore's name.
    pub fn key(&self) -> &LockKey {
        self.lease.key()
    }

    /// True while the permit is not lost and before its local deadline.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Time left before the local deadline.
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Completes when the permit is known lost (see [`Lease::lost`]).
    pub fn lost(&self) -> Lost {
        self.lease.lost()
    }

    /// Runs `work` until it finishes or the permit is lost.
    pub async fn guard<F: Future>(&self, work: F) -> Result<F::Output, LockError> {
        self.lease.guard(work).await
    }

    /// Extends the permit by its ttl now (see [`Lease::renew`]).
    pub async fn renew(&self) -> Result<(), LockError> {
        self.lease.renew().await
    }

    /// Gives the permit back if it is still ours; a lost permit gives
    /// `LockError::Lost`.
    pub async fn release(self) -> Result<(), LockError> {
        self.lease.release().await
    }

    /// Stops renewal without giving the permit back: it frees at its ttl (a
    /// simulated crash).
    pub fn abandon(self) {
        self.lease.abandon()
    }

    /// The underlying lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// Leadership of an election: held while [`Leadership::is_held`], lost when
/// [`Leadership::lost`] fires. Its fencing token is the term: every later
/// leader's term is greater, so a fence refuses a deposed leader's late writes.
///
/// Dropping it resigns in the background.
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Leadership {
    pub(crate) fn new(lease: Lease) -> Self {
        Leadership { lease }
    }

    /// The term: strictly greater than every earlier leader's term of this
    /// election. Pass it to every fenced write.
    pub fn term(&self) -> FencingToken {
        self.lease.token()
    }

    /// The election's name.
    pub fn key(&self) -> &LockKey {
        self.lease.key()
    }

    /// True while leading and before the local deadline.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Completes when leadership is known lost (see [`Lease::lost`]).
    pub fn lost(&self) -> Lost {
        self.lease.lost()
    }

    /// Runs `work` until it finishes or leadership is lost.
    pub async fn guard<F: Future>(&self, work: F) -> Result<F::Output, LockError> {
        self.lease.guard(work).await
    }

    /// Steps down, so the next campaigner leads; a lost leadership gives
    /// `LockError::Lost`.
    pub async fn resign(self) -> Result<(), LockError> {
        self.lease.release().await
    }

    /// Stops renewal without resigning: leadership ends at its ttl (a simulated
    /// crash).
    pub fn abandon(self) {
        self.lease.abandon()
    }

    /// The underlying lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}
