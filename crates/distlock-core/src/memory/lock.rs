//! The memory backend's exclusive lock: each key's holder and FIFO queue, the
//! store's steps on them (take, queue, leave, act if still the holder), and the
//! [`Backend`] that runs those steps through the client's simulated network.
//! Apart from the store and its network, which the semaphore and the read-write
//! lock share, as those two keep their own state in their own files.

use super::{Attempt, MemoryBackend, MemoryStore, Queued, State, clock_seed, revoked_signal};
use crate::backend::{
    AcquireRequest, Acquired, Backend, DynLeaderChanges, LeaderChanges, LossSignal, Ownership,
};
use crate::toolkit::{Holder, Inspect};
use crate::{
    Capabilities, FencingGuarantee, FencingToken, HolderMeta, LockError, LockKey, Primitives,
    Support, TokenDurability, Wake,
};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};

#[derive(Debug, Default)]
pub(super) struct KeyState {
    holder: Option<HeldBy>,
    queue: VecDeque<Queued>,
}

#[derive(Debug)]
struct HeldBy {
    id: u64,
    token: FencingToken,
    expires_at: Instant,
    revoked: Arc<Notify>,
    meta: HolderMeta,
}

impl KeyState {
    /// Drops an expired holder, telling it (its lease may still be listening).
    fn expire(&mut self, now: Instant) {
        if self.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
            self.remove_holder();
        }
    }

    pub(super) fn remove_holder(&mut self) {
        if let Some(holder) = self.holder.take() {
            holder.revoked.notify_one();
            self.wake_front();
        }
    }

    /// Only the first waiter is woken: no herd, and FIFO order.
    fn wake_front(&self) {
        if let Some(front) = self.queue.front() {
            front.wake.notify_one();
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.holder.is_none() && self.queue.is_empty()
    }
}

impl MemoryStore {
    /// Deletes a lock behind its holder's back, as an operator would. Returns
    /// whether it was held. The holder's `lost()` fires.
    pub fn delete(&self, key: &LockKey) -> bool {
        let mut state = self.state();
        let Some(entry) = state.keys.get_mut(key) else {
            return false;
        };
        entry.expire(Instant::now());
        let held = entry.holder.is_some();
        entry.remove_holder();
        if entry.is_empty() {
            state.keys.remove(key);
        }
        self.changed();
        held
    }

    /// Locks held or waited for whose name starts with `prefix`, one line per
    /// holder or waiter: what a crashed or cancelled client could leave behind.
    pub fn residue(&self, prefix: &str) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.state();
        let mut found = Vec::new();
        for (key, entry) in &mut state.keys {
            if !key.as_str().starts_with(prefix) {
                continue;
            }
            entry.expire(now);
            if let Some(holder) = &entry.holder {
                found.push(format!("{key}: held by client {}", holder.id));
            }
            found.extend(
                entry
                    .queue
                    .iter()
                    .map(|q| format!("{key}: waiter {}", q.id)),
            );
        }
        found
    }

    /// The current holder of `key`, if any.
    pub fn holder(&self, key: &LockKey) -> Option<Holder> {
        let now = Instant::now();
        let mut state = self.state();
        let entry = state.keys.get_mut(key)?;
        entry.expire(now);
        entry.holder.as_ref().map(|h| {
            Holder::new(
                format!("client {}", h.id),
                Some(h.token),
                Some(h.expires_at.saturating_duration_since(now)),
            )
            .with_meta(Some(h.meta.clone()))
        })
    }

    fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        me: &Queued,
        enqueue: bool,
    ) -> Attempt<(MemoryHandle, FencingToken)> {
        let (key, now) = (req.key, Instant::now());
        let mut guard = self.state();
        let State {
            keys,
            counters,
            next_id,
            ..
        } = &mut *guard;
        let entry = keys.entry(key.clone()).or_default();
        entry.expire(now);
        let first = entry.queue.front().map(|q| q.id) == Some(me.id);
        if entry.holder.is_none() && (entry.queue.is_empty() || first) {
            if first {
                entry.queue.pop_front();
                // The next in line must now watch the new holder's expiry.
                entry.wake_front();
            }
            let counter = counters.entry(key.clone()).or_insert_with(clock_seed);
            *counter += 1;
            *next_id += 1;
            let handle = MemoryHandle {
                key: key.clone(),
                id: *next_id,
                revoked: Arc::new(Notify::new()),
            };
            entry.holder = Some(HeldBy {
                id: handle.id,
                token: FencingToken::new(*counter),
                expires_at: now + req.ttl,
                revoked: handle.revoked.clone(),
                meta: req.meta.clone(),
            });
            self.changed();
            return Attempt::Taken((handle, FencingToken::new(*counter)));
        }
        if enqueue && !entry.queue.iter().any(|q| q.id == me.id) {
            entry.queue.push_back(Queued {
                id: me.id,
                wake: me.wake.clone(),
            });
        }
        let first = entry.queue.front().map(|q| q.id) == Some(me.id);
        let wake_at = entry
            .holder
            .as_ref()
            .filter(|_| first)
            .map(|h| h.expires_at);
        if entry.is_empty() {
            keys.remove(key);
        }
        Attempt::Blocked { wake_at }
    }

    fn leave_queue(&self, key: &LockKey, id: u64) {
        let mut state = self.state();
        let Some(entry) = state.keys.get_mut(key) else {
            return;
        };
        let Some(at) = entry.queue.iter().position(|q| q.id == id) else {
            return;
        };
        entry.queue.remove(at);
        if at == 0 {
            entry.wake_front();
        }
        if entry.is_empty() {
            state.keys.remove(key);
        }
    }

    /// Applies `f` to the entry if `handle` still holds it.
    fn if_holder(&self, handle: &MemoryHandle, f: impl FnOnce(&mut KeyState)) -> Ownership {
        let mut state = self.state();
        let Some(entry) = state.keys.get_mut(&handle.key) else {
            return Ownership::NotHeld;
        };
        entry.expire(Instant::now());
        let ours = entry.holder.as_ref().is_some_and(|h| h.id == handle.id);
        if ours {
            f(entry);
        }
        if entry.is_empty() {
            state.keys.remove(&handle.key);
        }
        if ours {
            self.changed();
            Ownership::Held
        } else {
            Ownership::NotHeld
        }
    }
}

/// What a memory client keeps per held lock.
#[derive(Debug)]
pub struct MemoryHandle {
    /// The lock this handle holds.
    pub key: LockKey,
    id: u64,
    revoked: Arc<Notify>,
}

#[async_trait]
impl Backend for MemoryBackend {
    type Handle = MemoryHandle;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .fencing(FencingGuarantee::Strict)
            .fifo(true)
            .wake(Wake::Push)
            .token_durability(TokenDurability::ServerClock)
            .ttl_granularity(Duration::from_nanos(1))
            .primitives(Primitives::ALL)
            .min_hold(Support::Offered)
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<MemoryHandle>, LockError> {
        let store = &self.store;
        let ((handle, token), sent_at) = (self.queue_for(
            &req,
            |me, enqueue| Ok(store.attempt(&req, me, enqueue)),
            |id| store.leave_queue(req.key, id),
            |(handle, _)| {
                store.if_holder(&handle, KeyState::remove_holder);
            },
        ))
        .await?;
        Ok(Acquired {
            handle,
            token,
            sent_at,
        })
    }

    async fn renew(&self, handle: &MemoryHandle, ttl: Duration) -> Result<Ownership, LockError> {
        self.round_trip(|store| {
            store.if_holder(handle, |entry| {
                if let Some(holder) = entry.holder.as_mut() {
                    holder.expires_at = Instant::now() + ttl;
                }
            })
        })
        .await
    }

    async fn release(&self, handle: &MemoryHandle) -> Result<Ownership, LockError> {
        (self.round_trip(|store| store.if_holder(handle, KeyState::remove_holder))).await
    }

    fn loss_signal(&self, handle: &MemoryHandle) -> Option<LossSignal> {
        Some(revoked_signal(&handle.revoked))
    }

    async fn holder_changes(&self, _key: &LockKey) -> Result<DynLeaderChanges, LockError> {
        self.round_trip(|store| Some(Box::new(Changes(store.changes.subscribe())) as _))
            .await
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}

/// Every change of any holder in the store: observers read their own name's
/// leader again and yield only a change. An expiry is no event here (the
/// store expires lazily); observers wake by the leader's expiry for that.
struct Changes(watch::Receiver<u64>);

#[async_trait]
impl LeaderChanges for Changes {
    async fn changed(&mut self) -> Result<(), LockError> {
        self.0
            .changed()
            .await
            .map_err(|_| LockError::backend("memory", "the store is gone"))
    }

    fn announces_arrivals(&self) -> bool {
        true
    }
}

#[async_trait]
impl Inspect for MemoryBackend {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        Ok(self.store.holder(key))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        Ok(self.store.residue(prefix))
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        Ok(self.store.delete(key))
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        Ok(vec![
            "memory:// locks live in this process only: other processes never see them".into(),
        ])
    }
}
