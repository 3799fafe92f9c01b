//! The semaphore: a FIFO queue of waiting keys and one permit key per slot in
//! use, under [`crate::semaphore_prefix`].
//!
//! Invariants:
//! - A permit is the key `slots/<n>`, `n` in `0..limit`, on its holder's
//!   lease, created only if absent: the slot names themselves bound the permits
//!   to `limit` and keep slots unique, whatever any client believes.
//! - Only the first waiting key (the oldest under `queue/`) may claim a slot,
//!   and it does so by trading its queue key for the permit key in one
//!   transaction, so waiters are served in arrival order.
//! - Every queue and permit key carries its client's limit as its value, and
//!   a key is put only if every waiting and permit key carries the same limit
//!   or there is none, so all clients of one semaphore agree on the limit.
//!   The limit lives only in keys on leases: an idle semaphore leaves nothing.
//!
//! No herd: a waiter watches only the key just before its own, which goes when
//! that waiter claims a slot (or gives up); the first waiter alone watches the
//! slots, which lose a key when a permit is released or expires. A release
//! wakes the first waiter, and its claim wakes the next. The token is the permit
//! key's create revision, so it rises with every permit handed out.

mod inspect;
mod protocol;

use crate::backend::{EtcdBackend, EtcdHandle};
use crate::error::{BACKEND, Failure};
use crate::etcd_lease::Slot;
use crate::keys::{contender_key, printable, semaphore_prefix};
use crate::queue::QueueEntry;
use crate::watch::{OnCreate, Subscription};
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, AcquiredPermit, Backend, BackendSemaphore, Bound, PermitRequest, SemaphoreBackend,
    SemaphoreInspect, WaitUntil,
};
use distlock_core::{Capabilities, LockError};
use prost::bytes::Bytes;
use protocol::{Layout, Look, Refused};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// A semaphore client for etcd, on the connection and leases of an
/// [`crate::EtcdLock`] (`lock.semaphore()`).
pub type EtcdSemaphore = BackendSemaphore<EtcdSemaphoreBackend>;

/// How often one acquire retries its enqueue when it found neither its limit
/// in use nor the semaphore unused: the semaphore emptied or filled between
/// the comparisons.
const LIMIT_RACES: usize = 3;

/// The etcd semaphore adapter. A permit is held like a lock key (renewed with
/// its lease, released by create revision, lost when deleted), so its handle
/// is the lock's own.
#[derive(Debug)]
pub struct EtcdSemaphoreBackend {
    lock: Arc<EtcdBackend>,
}

impl EtcdSemaphoreBackend {
    /// Semaphores on `lock`'s connection.
    pub fn new(lock: Arc<EtcdBackend>) -> Self {
        EtcdSemaphoreBackend { lock }
    }

    fn layout(&self, key: &distlock_core::LockKey) -> Layout {
        Layout::new(&semaphore_prefix(self.lock.namespace(), key))
    }

    /// One waiter's whole life: enqueue, wait for its turn and a free slot,
    /// trade its queue key for the permit.
    async fn contend(
        &self,
        req: &PermitRequest<'_>,
        layout: &Layout,
        slot: Slot,
    ) -> Result<AcquiredPermit<EtcdHandle>, Failure> {
        let lock = &self.lock;
        let acquire = &req.acquire;
        let lease = slot.lease().clone();
        let key = Bytes::from(contender_key(&layout.queue, lease.id(), slot.number()));
        let mut entry = QueueEntry::new(lock.rpc.clone(), lock.kv.clone(), key.clone(), slot);
        let (revision, mut look) = self.enqueue(&mut entry, req, layout, lease.id()).await?;
        // The watch of the key before ours, and of the slots.
        let mut watching: Option<(Vec<u8>, Subscription)> = None;
        let mut slots_watch: Option<Subscription> = None;
        loop {
            if !look.mine {
                entry.mark_gone();
                let gone = format!("the queued key {} disappeared", printable(&key));
                return Err(lock.rpc.endpoints.lease_gone(&gone).into());
            }
            // Waiters claim in queue order, as many at once as slots are free:
            // the one with `ahead` older waiters takes the free slot of that rank.
            if let Some(n) = nth_free_slot(req.limit, &look.taken, look.ahead) {
                let permit = Bytes::from(layout.permit(n));
                // The permit's loss watch, asked for before the key exists, so
                // the held permit needs no read of its own. Other clients take
                // this name after us: the watch goes with our permit rather
                // than linger for them.
                let held = lock.watches.deletion_once(&permit);
                let sent_at = Instant::now();
                let claim = protocol::claim(
                    lock.rpc.clone(),
                    lock.kv.clone(),
                    (key.clone(), revision),
                    permit.clone(),
                    lease.id(),
                    req.limit,
                );
                let response = entry.trade(revision, &permit, claim).await?;
                if response.succeeded() {
                    let at = crate::protocol::header(&response)?;
                    let acquired =
                        (lock.claim(entry, &lease, (at, at), sent_at, Some(held))).await?;
                    return Ok(AcquiredPermit { acquired, slot: n });
                }
                // The slot was taken after our read (by a permit released and
                // claimed meanwhile) or our key is gone: read again.
                look =
                    protocol::look(&lock.rpc, &lock.kv, layout, &key, revision, req.limit).await?;
                continue;
            }
            if acquire.wait == WaitUntil::No {
                entry.remove().await?;
                return Err(acquire.not_acquired().into());
            }
            // The first waiter watches the slots, any other the key before it.
            // The slots watch is asked for once we are second in line, and a
            // key's watch is kept while it is the right one: etcd may serve a
            // watch created while writes commit from its catch-up path, which
            // delivers a deletion up to 100 ms late until it is in sync, so
            // neither is created at the moment it is needed.
            if look.ahead <= 1 && slots_watch.is_none() {
                slots_watch = Some(lock.watches.deletions_under(&layout.slots));
            }
            let target = look.predecessor.clone().filter(|_| look.ahead > 0);
            let (watched, on_create) = match target {
                None => {
                    let slots = slots_watch
                        .get_or_insert_with(|| lock.watches.deletions_under(&layout.slots));
                    // Asked for before our last read, it needs a read of its
                    // own only if etcd started it after that read.
                    (slots, OnCreate::RereadIfLater)
                }
                Some(before) => {
                    let watched = match &mut watching {
                        Some((kept, watched)) if *kept == before => watched,
                        _ => {
                            let watched = lock.watches.deletion(&Bytes::from(before.clone()));
                            &mut watching.insert((before, watched)).1
                        }
                    };
                    (watched, OnCreate::Reread)
                }
            };
            lock.wait_in_queue(
                &mut entry,
                (&mut *watched, on_create),
                look.header,
                &lease,
                acquire,
            )
            .await?;
            // The first waiter woken by a released permit tries that slot at
            // once: the claim fails harmlessly if it was taken again.
            if let Some(n) = watched.deleted_key().and_then(|k| layout.slot_of(k)) {
                look.taken.retain(|taken| *taken != n);
                continue;
            }
            look = protocol::look(&lock.rpc, &lock.kv, layout, &key, revision, req.limit).await?;
        }
    }

    /// Puts our key, carrying our limit, in the queue, if every key there and
    /// in the slots carries the same or there is none. Returns our key's
    /// create revision and what the queue looks like.
    async fn enqueue(
        &self,
        entry: &mut QueueEntry,
        req: &PermitRequest<'_>,
        layout: &Layout,
        lease: i64,
    ) -> Result<(i64, Look), Failure> {
        let lock = &self.lock;
        for _ in 0..=LIMIT_RACES {
            let txn = protocol::enqueue(
                lock.rpc.clone(),
                lock.kv.clone(),
                layout.clone(),
                entry.key().clone(),
                lease,
                req.limit,
            );
            let response = entry.put(txn).await?;
            match protocol::enqueued(layout, &response)? {
                Ok(queued) => return Ok(queued),
                Err(Refused::Adopted(revision)) => {
                    let (rpc, kv, key) = (&lock.rpc, &lock.kv, entry.key());
                    let look = protocol::look(rpc, kv, layout, key, revision, req.limit).await?;
                    return Ok((revision, look));
                }
                Err(Refused::Limit(Some((key, stored)))) => {
                    let existing = protocol::parse_limit(&key, &stored)?;
                    if existing != req.limit {
                        return Err(req.mismatch(existing).into());
                    }
                }
                // Emptied between the two comparisons of one transaction's
                // branches: look again.
                Err(Refused::Limit(None)) => {}
            }
        }
        Err(LockError::backend(
            BACKEND,
            format!(
                "the limit of semaphore `{}` kept changing under this acquire: give every client \
                 of one name the same limit",
                req.acquire.key
            ),
        )
        .into())
    }
}

/// The free slot of rank `rank` (0: the lowest) in `0..limit`, if there are
/// that many free.
fn nth_free_slot(limit: u32, taken: &[u32], rank: usize) -> Option<u32> {
    let taken: BTreeSet<u32> = taken.iter().copied().collect();
    (0..limit).filter(|n| !taken.contains(n)).nth(rank)
}

#[async_trait]
impl SemaphoreBackend for EtcdSemaphoreBackend {
    type Permit = Bound<EtcdBackend>;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<Bound<EtcdBackend>>, LockError> {
        let layout = self.layout(req.acquire.key);
        let won = (self.lock)
            .on_lease(req.acquire.ttl, &layout.queue, |slot| {
                self.contend(&req, &layout, slot)
            })
            .await?;
        let Acquired {
            handle,
            token,
            sent_at,
        } = won.acquired;
        Ok(AcquiredPermit {
            acquired: Acquired {
                handle: Bound::new(self.lock.clone(), handle),
                token,
                sent_at,
            },
            slot: won.slot,
        })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::nth_free_slot;
    use super::protocol::{Layout, parse_limit};

    #[test]
    fn waiters_take_free_slots_by_rank() {
        assert_eq!(nth_free_slot(4, &[], 0), Some(0));
        assert_eq!(nth_free_slot(4, &[0, 2], 0), Some(1));
        assert_eq!(nth_free_slot(4, &[0, 2], 1), Some(3));
        assert_eq!(nth_free_slot(4, &[0, 2], 2), None);
        assert_eq!(nth_free_slot(2, &[1, 0], 0), None);
    }

    #[test]
    fn only_permit_keys_name_slots() {
        let layout = Layout::new(b"ns/%sem/workers/");
        assert_eq!(layout.permit(17), b"ns/%sem/workers/slots/17");
        assert_eq!(layout.slot_of(b"ns/%sem/workers/slots/17"), Some(17));
        assert_eq!(layout.slot_of(b"ns/%sem/workers/queue/694d"), None);
        assert_eq!(layout.slot_of(b"ns/%sem/workers/slots/x"), None);
        assert_eq!(layout.slot_of(b"ns/%sem/workers/limit"), None);
    }

    #[test]
    fn a_key_without_our_limit_is_a_clear_error() {
        let key = b"ns/%sem/workers/slots/0";
        assert_eq!(parse_limit(key, b"3").ok(), Some(3));
        let message = |stored: &[u8]| match parse_limit(key, stored) {
            Err(crate::error::Failure::Other(e)) => e.to_string(),
            _ => panic!("{stored:?} was accepted as a limit"),
        };
        let foreign = message(b"three");
        assert!(foreign.contains("ns/%sem/workers/slots/0") && foreign.contains("\"three\""));
        assert!(message(b"").contains("previous distlock release"));
    }
}
