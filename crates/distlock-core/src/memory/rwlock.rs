//! The memory backend's read-write lock: readers share, a writer holds alone,
//! and requests are granted in arrival order (a reader never overtakes a
//! waiting writer), each waiter woken when it reaches the front.

use super::{MemoryBackend, MemoryStore, clock_seed};
use crate::backend::{AcquireRequest, Acquired, Ownership, WaitUntil};
use crate::rwlock::{RwLockBackend, RwLockInspect, RwMode, ShareInfo};
use crate::toolkit::CancelGuard;
use crate::{Capabilities, FencingToken, LockError, LockKey};
use async_trait::async_trait;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

mod share;
pub use share::ShareHandle;

/// One read-write lock's state in the store. Its token counter outlives the
/// shares.
#[derive(Debug, Default)]
pub(super) struct RwState {
    /// Live shares by id: any number of readers, or one writer.
    shares: BTreeMap<u64, Live>,
    queue: VecDeque<Waiter>,
    counter: Option<u64>,
}

#[derive(Debug)]
struct Live {
    mode: RwMode,
    token: FencingToken,
    expires_at: Instant,
    revoked: Arc<Notify>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

impl RwState {
    fn expire(&mut self, now: Instant) {
        let expired: Vec<u64> = (self.shares.iter())
            .filter(|(_, s)| s.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u64) -> bool {
        let Some(share) = self.shares.remove(&id) else {
            return false;
        };
        share.revoked.notify_one();
        self.wake_front();
        true
    }

    /// Tells every holder its share is gone (a restart without persistence).
    pub(super) fn revoke_all(&mut self) {
        for share in std::mem::take(&mut self.shares).into_values() {
            share.revoked.notify_one();
        }
    }

    /// Only the first waiter is woken; a granted reader wakes the next, so a
    /// run of readers at the front is granted together.
    fn wake_front(&self) {
        if let Some(front) = self.queue.front() {
            front.wake.notify_one();
        }
    }

    /// Whether `mode` is compatible with the live shares.
    fn admits(&self, mode: RwMode) -> bool {
        match mode {
            RwMode::Read => self.shares.values().all(|s| s.mode == RwMode::Read),
            RwMode::Write => self.shares.is_empty(),
        }
    }

    /// The earliest expiry among the shares that block `mode`.
    fn blocked_until(&self, mode: RwMode) -> Option<Instant> {
        (self.shares.values())
            .filter(|s| mode == RwMode::Write || s.mode == RwMode::Write)
            .map(|s| s.expires_at)
            .min()
    }
}

enum Attempt {
    Taken {
        id: u64,
        token: FencingToken,
        revoked: Arc<Notify>,
    },
    /// Blocked. `wake_at` is the earliest blocking expiry when we are first.
    Blocked { wake_at: Option<Instant> },
}

impl MemoryStore {
    /// One attempt for `mode`: granted only when compatible with the holders
    /// and nobody is queued ahead (queue order: no writer starvation).
    fn try_share(
        &self,
        req: &AcquireRequest<'_>,
        mode: RwMode,
        me: &Waiter,
        enqueue: bool,
    ) -> Attempt {
        let now = Instant::now();
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let rw = state.rwlocks.entry(req.key.clone()).or_default();
        rw.expire(now);
        let first = rw.queue.front().map(|w| w.id) == Some(me.id);
        if rw.admits(mode) && (rw.queue.is_empty() || first) {
            if first {
                rw.queue.pop_front();
                // A reader behind us may share with us: it tries next.
                rw.wake_front();
            }
            let counter = rw.counter.get_or_insert_with(clock_seed);
            *counter += 1;
            let token = FencingToken::new(*counter);
            let revoked = Arc::new(Notify::new());
            let live = Live {
                mode,
                token,
                expires_at: now + req.ttl,
                revoked: revoked.clone(),
            };
            rw.shares.insert(id, live);
            return Attempt::Taken { id, token, revoked };
        }
        if enqueue && !rw.queue.iter().any(|w| w.id == me.id) {
            rw.queue.push_back(Waiter {
                id: me.id,
                wake: me.wake.clone(),
            });
        }
        let first = rw.queue.front().map(|w| w.id) == Some(me.id);
        let wake_at = rw.blocked_until(mode).filter(|_| first);
        Attempt::Blocked { wake_at }
    }

    fn leave_rw_queue(&self, key: &LockKey, id: u64) {
        let mut state = self.state();
        let Some(rw) = state.rwlocks.get_mut(key) else {
            return;
        };
        if let Some(at) = rw.queue.iter().position(|w| w.id == id) {
            rw.queue.remove(at);
            if at == 0 {
                rw.wake_front();
            }
        }
    }

    /// Applies `f` to the share `id` of `key` if it is still live.
    fn if_share_holder(
        &self,
        key: &LockKey,
        id: u64,
        f: impl FnOnce(&mut RwState, u64),
    ) -> Ownership {
        let mut state = self.state();
        let Some(rw) = state.rwlocks.get_mut(key) else {
            return Ownership::NotHeld;
        };
        rw.expire(Instant::now());
        if rw.shares.contains_key(&id) {
            f(rw, id);
            Ownership::Held
        } else {
            Ownership::NotHeld
        }
    }

    /// The live shares of the read-write lock `key`.
    pub fn shares(&self, key: &LockKey) -> Vec<ShareInfo> {
        let mut state = self.state();
        let Some(rw) = state.rwlocks.get_mut(key) else {
            return Vec::new();
        };
        rw.expire(Instant::now());
        (rw.shares.iter())
            .map(|(id, s)| ShareInfo {
                mode: s.mode,
                token: s.token,
                holder: format!("client {id}"),
            })
            .collect()
    }

    /// Deletes every share of the read-write lock `key` behind its holders'
    /// backs; returns how many there were.
    pub fn delete_shares(&self, key: &LockKey) -> usize {
        let mut state = self.state();
        let Some(rw) = state.rwlocks.get_mut(key) else {
            return 0;
        };
        rw.expire(Instant::now());
        let ids: Vec<u64> = rw.shares.keys().copied().collect();
        ids.into_iter().filter(|id| rw.remove(*id)).count()
    }

    fn rwlock_residue(&self, prefix: &str) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.state();
        let mut found = Vec::new();
        for (key, rw) in &mut state.rwlocks {
            if !key.as_str().starts_with(prefix) {
                continue;
            }
            rw.expire(now);
            found.extend(
                rw.shares
                    .iter()
                    .map(|(id, s)| format!("{key}: {} share {id}", s.mode)),
            );
            found.extend(rw.queue.iter().map(|w| format!("{key}: waiter {}", w.id)));
        }
        found
    }
}

/// The memory adapter's read-write lock side; faults injected into its
/// [`MemoryBackend`] apply to its shares too.
#[derive(Debug, Clone)]
pub struct MemoryRwLockBackend {
    network: Arc<MemoryBackend>,
}

impl MemoryRwLockBackend {
    pub(super) fn new(network: Arc<MemoryBackend>) -> Self {
        MemoryRwLockBackend { network }
    }

    /// The client's simulated network, to inject faults.
    pub fn network(&self) -> &MemoryBackend {
        &self.network
    }

    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        let (network, store) = (&self.network, &self.network.store);
        let no_wait = req.wait == WaitUntil::No;
        let me = Waiter {
            id: store.next_id(),
            wake: Arc::new(Notify::new()),
        };
        // A cancelled waiter leaves the queue, so nobody waits behind a ghost.
        let _in_queue = CancelGuard::new(me.id, |id| {
            store.leave_rw_queue(req.key, id);
            None
        });
        loop {
            let sent_at = Instant::now();
            tokio::select! {
                reached = network.reach() => reached?,
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
            }
            match store.try_share(&req, mode, &me, !no_wait) {
                Attempt::Taken { id, token, revoked } => {
                    // A share won while the caller gives up is given back.
                    let in_flight = CancelGuard::new(id, |id| {
                        store.if_share_holder(req.key, id, |rw, id| {
                            rw.remove(id);
                        });
                        None
                    });
                    network.reply().await;
                    in_flight.disarm();
                    let handle = ShareHandle {
                        network: network.clone(),
                        key: req.key.clone(),
                        id,
                        revoked,
                    };
                    return Ok(Acquired {
                        handle,
                        token,
                        sent_at,
                    });
                }
                Attempt::Blocked { .. } if no_wait => {
                    network.reply().await;
                    return Err(req.not_acquired());
                }
                Attempt::Blocked { wake_at } => {
                    let expiry = async {
                        match wake_at {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = me.wake.notified() => {}
                        _ = expiry => {}
                        _ = req.wait.reached() => return Err(req.not_acquired()),
                    }
                }
            }
        }
    }
}

#[async_trait]
impl RwLockBackend for MemoryRwLockBackend {
    type Share = ShareHandle;

    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        crate::backend::Backend::capabilities(&*self.network)
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        self.acquire(req, RwMode::Read).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        self.acquire(req, RwMode::Write).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

#[async_trait]
impl RwLockInspect for MemoryRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        Ok(self.network.store.shares(key))
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        Ok(self.network.store.delete_shares(key))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        Ok(self.network.store.rwlock_residue(prefix))
    }
}
