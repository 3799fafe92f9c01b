//! The memory backend's semaphore: at most `limit` live permits per name, the
//! lowest free slot for each new one, FIFO waiters woken one at a time.

use super::{MemoryBackend, MemoryStore, Queued, clock_seed};
use crate::backend::{Acquired, Holding, LossSignal, Ownership, WaitUntil};
use crate::semaphore::lowest_free_slot;
use crate::semaphore::{
    AcquiredPermit, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect,
};
use crate::toolkit::CancelGuard;
use crate::{Capabilities, FencingToken, LockError, LockKey, LossReason};
use async_trait::async_trait;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One semaphore's state in the store. Its token counter outlives the permits.
#[derive(Debug, Default)]
pub(super) struct SemState {
    /// The limit its holders and waiters use; meaningful while any exist.
    limit: u32,
    permits: BTreeMap<u32, Live>,
    queue: VecDeque<Queued>,
    counter: Option<u64>,
}

#[derive(Debug)]
struct Live {
    id: u64,
    token: FencingToken,
    expires_at: Instant,
    revoked: Arc<Notify>,
}

impl SemState {
    fn expire(&mut self, now: Instant) {
        let expired: Vec<u32> = (self.permits.iter())
            .filter(|(_, p)| p.expires_at <= now)
            .map(|(slot, _)| *slot)
            .collect();
        for slot in expired {
            self.remove(slot);
        }
    }

    fn remove(&mut self, slot: u32) -> bool {
        let Some(permit) = self.permits.remove(&slot) else {
            return false;
        };
        permit.revoked.notify_one();
        self.wake_front();
        true
    }

    /// Tells every holder its permit is gone (a restart without persistence).
    pub(super) fn revoke_all(&mut self) {
        for permit in std::mem::take(&mut self.permits).into_values() {
            permit.revoked.notify_one();
        }
    }

    /// Only the first waiter is woken: FIFO, and no herd.
    fn wake_front(&self) {
        if let Some(front) = self.queue.front() {
            front.wake.notify_one();
        }
    }

    fn in_use(&self) -> bool {
        !self.permits.is_empty() || !self.queue.is_empty()
    }

    /// The slot of the live permit `id`, if it still has one.
    fn slot_of(&self, id: u64) -> Option<u32> {
        (self.permits.iter())
            .find(|(_, p)| p.id == id)
            .map(|(slot, _)| *slot)
    }
}

enum Attempt {
    Taken {
        id: u64,
        slot: u32,
        token: FencingToken,
        revoked: Arc<Notify>,
    },
    /// All taken. `wake_at` is the earliest expiry when we are first in line.
    Full { wake_at: Option<Instant> },
}

impl MemoryStore {
    fn try_permit(
        &self,
        req: &PermitRequest<'_>,
        me: &Queued,
        enqueue: bool,
    ) -> Result<Attempt, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let sem = state.semaphores.entry(req.acquire.key.clone()).or_default();
        sem.expire(now);
        if !sem.in_use() {
            sem.limit = req.limit;
        } else if sem.limit != req.limit {
            return Err(req.mismatch(sem.limit));
        }
        let first = sem.queue.front().map(|q| q.id) == Some(me.id);
        let slot = lowest_free_slot(req.limit, sem.permits.keys().copied());
        if let Some(slot) = slot.filter(|_| sem.queue.is_empty() || first) {
            if first {
                sem.queue.pop_front();
                // Another slot may be free too: the next in line tries.
                sem.wake_front();
            }
            let counter = sem.counter.get_or_insert_with(clock_seed);
            *counter += 1;
            let token = FencingToken::new(*counter);
            let revoked = Arc::new(Notify::new());
            sem.permits.insert(
                slot,
                Live {
                    id,
                    token,
                    expires_at: now + req.acquire.ttl,
                    revoked: revoked.clone(),
                },
            );
            return Ok(Attempt::Taken {
                id,
                slot,
                token,
                revoked,
            });
        }
        if enqueue && !sem.queue.iter().any(|q| q.id == me.id) {
            sem.queue.push_back(Queued {
                id: me.id,
                wake: me.wake.clone(),
            });
        }
        let first = sem.queue.front().map(|q| q.id) == Some(me.id);
        let wake_at = (sem.permits.values())
            .map(|p| p.expires_at)
            .min()
            .filter(|_| first);
        Ok(Attempt::Full { wake_at })
    }

    fn leave_semaphore_queue(&self, key: &LockKey, id: u64) {
        let mut state = self.state();
        let Some(sem) = state.semaphores.get_mut(key) else {
            return;
        };
        if let Some(at) = sem.queue.iter().position(|q| q.id == id) {
            sem.queue.remove(at);
            if at == 0 {
                sem.wake_front();
            }
        }
    }

    /// Applies `f` to the permit's slot if `id` still holds a live one.
    fn if_permit_holder(
        &self,
        key: &LockKey,
        id: u64,
        f: impl FnOnce(&mut SemState, u32),
    ) -> Ownership {
        let mut state = self.state();
        let Some(sem) = state.semaphores.get_mut(key) else {
            return Ownership::NotHeld;
        };
        sem.expire(Instant::now());
        match sem.slot_of(id) {
            Some(slot) => {
                f(sem, slot);
                Ownership::Held
            }
            None => Ownership::NotHeld,
        }
    }

    /// The live permits of the semaphore `key`.
    pub fn permits(&self, key: &LockKey) -> Vec<PermitInfo> {
        let mut state = self.state();
        let Some(sem) = state.semaphores.get_mut(key) else {
            return Vec::new();
        };
        sem.expire(Instant::now());
        (sem.permits.iter())
            .map(|(slot, p)| PermitInfo {
                slot: *slot,
                token: p.token,
                holder: format!("client {}", p.id),
            })
            .collect()
    }

    /// Deletes the permit in `slot` of `key` behind its holder's back.
    pub fn delete_permit(&self, key: &LockKey, slot: u32) -> bool {
        let mut state = self.state();
        state
            .semaphores
            .get_mut(key)
            .is_some_and(|sem| sem.remove(slot))
    }

    fn semaphore_residue(&self, prefix: &str) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.state();
        let mut found = Vec::new();
        for (key, sem) in &mut state.semaphores {
            if !key.as_str().starts_with(prefix) {
                continue;
            }
            sem.expire(now);
            found.extend(
                sem.permits
                    .keys()
                    .map(|slot| format!("{key}: permit {slot}")),
            );
            found.extend(sem.queue.iter().map(|q| format!("{key}: waiter {}", q.id)));
        }
        found
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
        let network = &self.network;
        network.reach().await?;
        let outcome = network
            .store
            .if_permit_holder(&self.key, self.id, |sem, slot| {
                if let Some(p) = sem.permits.get_mut(&slot) {
                    p.expires_at = Instant::now() + ttl;
                }
            });
        network.reply().await;
        Ok(outcome)
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let network = &self.network;
        network.reach().await?;
        let outcome = (network.store).if_permit_holder(&self.key, self.id, |sem, slot| {
            sem.remove(slot);
        });
        network.reply().await;
        Ok(outcome)
    }

    fn loss_signal(&self) -> Option<LossSignal> {
        let revoked = self.revoked.clone();
        Some(Box::pin(async move {
            revoked.notified().await;
            LossReason::Revoked
        }))
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
        let wait = req.acquire.wait;
        let no_wait = wait == WaitUntil::No;
        let me = Queued {
            id: store.next_id(),
            wake: Arc::new(Notify::new()),
        };
        // A cancelled waiter leaves the queue, so nobody waits behind a ghost.
        let _in_queue = CancelGuard::new(me.id, |id| {
            store.leave_semaphore_queue(req.acquire.key, id);
            None
        });
        loop {
            let sent_at = Instant::now();
            tokio::select! {
                reached = network.reach() => reached?,
                _ = wait.reached(), if !no_wait => return Err(req.acquire.not_acquired()),
            }
            match store.try_permit(&req, &me, !no_wait)? {
                Attempt::Taken {
                    id,
                    slot,
                    token,
                    revoked,
                } => {
                    // A permit won while the caller gives up is given back.
                    let in_flight = CancelGuard::new(id, |id| {
                        store.if_permit_holder(req.acquire.key, id, |sem, slot| {
                            sem.remove(slot);
                        });
                        None
                    });
                    network.reply().await;
                    in_flight.disarm();
                    let handle = PermitHandle {
                        network: network.clone(),
                        key: req.acquire.key.clone(),
                        id,
                        revoked,
                    };
                    let acquired = Acquired {
                        handle,
                        token,
                        sent_at,
                    };
                    return Ok(AcquiredPermit { acquired, slot });
                }
                Attempt::Full { .. } if no_wait => {
                    network.reply().await;
                    return Err(req.acquire.not_acquired());
                }
                Attempt::Full { wake_at } => {
                    let expiry = async {
                        match wake_at {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = me.wake.notified() => {}
                        _ = expiry => {}
                        _ = wait.reached() => return Err(req.acquire.not_acquired()),
                    }
                }
            }
        }
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
