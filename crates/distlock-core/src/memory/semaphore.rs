//! The memory backend's semaphore: at most `limit` live permits per name, the
//! lowest free slot for each new one, FIFO waiters woken one at a time.

use super::holders::{self, Holders};
use super::{Attempt, MemoryBackend, MemoryStore, Queued, revoked_signal};
use crate::backend::{Acquired, Holding, LossSignal, Ownership};
use crate::semaphore::lowest_free_slot;
use crate::semaphore::{
    AcquiredPermit, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect,
};
use crate::{Capabilities, FencingToken, LockError, LockKey};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One semaphore's state in the store: its permits by slot, each with its
/// holder's id. Its token counter outlives the permits.
#[derive(Debug, Default)]
pub(super) struct SemState {
    /// The limit its holders and waiters use; meaningful while any exist.
    limit: u32,
    pub(super) holders: Holders<u32, u64>,
}

/// A permit the store granted.
struct Won {
    id: u64,
    slot: u32,
    token: FencingToken,
    revoked: Arc<Notify>,
}

impl MemoryStore {
    fn try_permit(
        &self,
        req: &PermitRequest<'_>,
        me: &Queued,
        enqueue: bool,
    ) -> Result<Attempt<Won>, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let sem = state.semaphores.entry(req.acquire.key.clone()).or_default();
        sem.holders.expire(now);
        if !sem.holders.in_use() {
            sem.limit = req.limit;
        } else if sem.limit != req.limit {
            return Err(req.mismatch(sem.limit));
        }
        let permits = &mut sem.holders;
        let slot = lowest_free_slot(req.limit, permits.live.keys().copied());
        if let Some(slot) = slot.filter(|_| permits.my_turn(me)) {
            let (token, revoked) = permits.grant(me, slot, id, now + req.acquire.ttl);
            return Ok(Attempt::Taken(Won {
                id,
                slot,
                token,
                revoked,
            }));
        }
        let earliest = permits.live.values().map(|p| p.expires_at).min();
        Ok(permits.blocked(me, enqueue, earliest))
    }

    fn leave_semaphore_queue(&self, key: &LockKey, id: u64) {
        if let Some(sem) = self.state().semaphores.get_mut(key) {
            sem.holders.leave(id);
        }
    }

    /// Applies `f` to the permit's slot if `id` still holds a live one.
    fn if_permit_holder(
        &self,
        key: &LockKey,
        id: u64,
        f: impl FnOnce(&mut Holders<u32, u64>, u32),
    ) -> Ownership {
        let mut state = self.state();
        let permits = state.semaphores.get_mut(key).map(|sem| &mut sem.holders);
        let slot_of_id = |permits: &Holders<u32, u64>| {
            (permits.live.iter())
                .find(|(_, p)| p.what == id)
                .map(|(slot, _)| *slot)
        };
        holders::if_holder(permits, slot_of_id, f)
    }

    /// The live permits of the semaphore `key`.
    pub fn permits(&self, key: &LockKey) -> Vec<PermitInfo> {
        let mut state = self.state();
        let sem = state.semaphores.get_mut(key).map(|sem| &mut sem.holders);
        holders::live_now(sem, |slot, p| {
            PermitInfo::new(*slot, p.token, format!("client {}", p.what))
        })
    }

    /// Deletes the permit in `slot` of `key` behind its holder's back.
    pub fn delete_permit(&self, key: &LockKey, slot: u32) -> bool {
        let mut state = self.state();
        state
            .semaphores
            .get_mut(key)
            .is_some_and(|sem| sem.holders.remove(slot))
    }

    fn semaphore_residue(&self, prefix: &str) -> Vec<String> {
        let mut state = self.state();
        let names = (state.semaphores.iter_mut()).map(|(key, sem)| (key, &mut sem.holders));
        holders::residue(names, prefix, |slot, _| format!("permit {slot}"))
    }
}

/// The memory adapter's semaphore side; faults injected into its
/// [`MemoryBackend`] apply to its permits too.
#[derive(Debug, Clone)]
pub struct MemorySemaphoreBackend {
    network: Arc<MemoryBackend>,
}

impl MemorySemaphoreBackend {
    pub(super) fn new(network: Arc<MemoryBackend>) -> Self {
        MemorySemaphoreBackend { network }
    }

    /// The client's simulated network, to inject faults.
    pub fn network(&self) -> &MemoryBackend {
        &self.network
    }
}

/// A held memory permit.
#[derive(Debug)]
pub struct PermitHandle {
    network: Arc<MemoryBackend>,
    key: LockKey,
    id: u64,
    revoked: Arc<Notify>,
}

#[async_trait]
impl Holding for PermitHandle {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        (self.network.round_trip(|store| {
            store.if_permit_holder(&self.key, self.id, |permits, slot| {
                if let Some(p) = permits.live.get_mut(&slot) {
                    p.expires_at = Instant::now() + ttl;
                }
            })
        }))
        .await
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        (self.network.round_trip(|store| {
            store.if_permit_holder(&self.key, self.id, |permits, slot| {
                permits.remove(slot);
            })
        }))
        .await
    }

    fn loss_signal(&self) -> Option<LossSignal> {
        Some(revoked_signal(&self.revoked))
    }
}

#[async_trait]
impl SemaphoreBackend for MemorySemaphoreBackend {
    type Permit = PermitHandle;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        crate::backend::Backend::capabilities(&*self.network)
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<PermitHandle>, LockError> {
        let (network, store) = (&self.network, &self.network.store);
        let key = req.acquire.key;
        let (won, sent_at) = (network.queue_for(
            &req.acquire,
            |me, enqueue| store.try_permit(&req, me, enqueue),
            |id| store.leave_semaphore_queue(key, id),
            |won| {
                store.if_permit_holder(key, won.id, |permits, slot| {
                    permits.remove(slot);
                });
            },
        ))
        .await?;
        let handle = PermitHandle {
            network: network.clone(),
            key: key.clone(),
            id: won.id,
            revoked: won.revoked,
        };
        let acquired = Acquired {
            handle,
            token: won.token,
            sent_at,
        };
        Ok(AcquiredPermit {
            acquired,
            slot: won.slot,
        })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl SemaphoreInspect for MemorySemaphoreBackend {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        Ok(self.network.store.permits(key))
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        Ok(self.network.store.delete_permit(key, slot))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        Ok(self.network.store.semaphore_residue(prefix))
    }
}
