//! A slot: one key's right to a lease, which keeps the lease in use while it
//! lives and taints it if dropped while its key may remain.

use super::{SessionLease, lock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

impl SessionLease {
    /// Takes a slot in `queue`, unless the lease no longer takes keys.
    pub(super) fn claim(&self, queue: &[u8]) -> Option<Slot> {
        let mut uses = lock(&self.state.uses);
        if uses.tainted || uses.retired || self.ended().is_some() {
            return None;
        }
        let taken = uses.slots.entry(queue.to_vec()).or_default();
        let number = (0..=u32::MAX).find(|n| !taken.contains(n))?;
        taken.insert(number);
        uses.count += 1;
        Some(Slot {
            lease: self.clone(),
            queue: queue.to_vec(),
            number,
            clean: Arc::new(AtomicBool::new(false)),
            reserved: Mutex::new(None),
        })
    }
}

/// The right to one key in one queue on one lease. While it exists the lease is in
/// use; dropping it without [`Slot::mark_clean`] taints the lease.
#[derive(Debug)]
pub(crate) struct Slot {
    lease: SessionLease,
    queue: Vec<u8>,
    number: u32,
    clean: Arc<AtomicBool>,
    /// Until when the slot's key may live on a lease of its own after the
    /// slot is dropped ([`Slot::reserve_until`]).
    reserved: Mutex<Option<Instant>>,
}

impl Slot {
    /// Keeps this slot's number taken until `until`, even once the slot is
    /// dropped: its key, moved to a lease of its own, may live until then,
    /// and this client's next contender of the same name and number would
    /// find it and adopt it as its own (`protocol::enqueue`).
    pub(crate) fn reserve_until(&self, until: Instant) {
        lock(&self.reserved).replace(until);
    }

    pub(crate) fn lease(&self) -> &SessionLease {
        &self.lease
    }

    pub(crate) fn number(&self) -> u32 {
        self.number
    }

    /// Stops the lease from taking new keys: this slot's key is abandoned and
    /// must expire with the lease, which a new key on it would keep alive.
    pub(crate) fn taint(&self) {
        lock(&self.lease.state.uses).tainted = true;
    }

    /// Records that no key of this slot exists any more.
    pub(crate) fn mark_clean(&self) {
        self.clean.store(true, Ordering::Release);
    }

    /// A flag that marks the slot clean from another task (a loss watch that saw the
    /// key deleted).
    pub(crate) fn clean_flag(&self) -> Arc<AtomicBool> {
        self.clean.clone()
    }
}

// Not an acquire undo, so not a `CancelGuard`: every slot ends here, held
// locks' and queue entries' alike, to keep the lease's use count. It sends
// nothing; an unclean slot only stops the lease from being kept alive for it.
impl Drop for Slot {
    fn drop(&mut self) {
        let reserved = lock(&self.reserved).take();
        let runtime = tokio::runtime::Handle::try_current();
        if let (Some(until), Ok(runtime)) = (reserved.filter(|u| *u > Instant::now()), runtime) {
            let kept = Slot {
                lease: self.lease.clone(),
                queue: std::mem::take(&mut self.queue),
                number: self.number,
                clean: self.clean.clone(),
                reserved: Mutex::new(None),
            };
            runtime.spawn(async move {
                tokio::time::sleep_until(until.into()).await;
                drop(kept);
            });
            return;
        }
        let state = &self.lease.state;
        let mut uses = lock(&state.uses);
        if let Some(taken) = uses.slots.get_mut(&self.queue) {
            taken.remove(&self.number);
            if taken.is_empty() {
                uses.slots.remove(&self.queue);
            }
        }
        uses.count = uses.count.saturating_sub(1);
        if !self.clean.load(Ordering::Acquire) {
            uses.tainted = true;
        }
        // The keeper retires a lease nobody uses that is tainted, or whose
        // client is gone, at once (an idle one only after a while, on a
        // beat): it is woken for those alone, not on every release.
        let retire = uses.count == 0 && (uses.tainted || state.pool.strong_count() == 0);
        if uses.count == 0 {
            uses.idle_since = Instant::now();
        }
        drop(uses);
        if retire {
            state.uses_changed.notify_one();
        }
    }
}
