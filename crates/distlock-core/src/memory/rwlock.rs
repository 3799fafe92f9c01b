//! The memory backend's read-write lock: readers share, a writer holds alone,
//! and requests are granted in arrival order (a reader never overtakes a
//! waiting writer), each waiter woken when it reaches the front.

use super::holders::{self, Holders};
use super::{Attempt, MemoryBackend, MemoryStore, Queued};
use crate::backend::{AcquireRequest, Acquired, Ownership};
use crate::rwlock::{RwLockBackend, RwLockInspect, RwMode, ShareInfo};
use crate::{Capabilities, FencingToken, LockError, LockKey};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

mod share;
pub use share::ShareHandle;

/// One read-write lock's live shares by id: any number of readers, or one
/// writer. Its token counter outlives the shares.
pub(super) type RwState = Holders<u64, RwMode>;

impl RwState {
    /// Whether `mode` is compatible with the live shares.
    fn admits(&self, mode: RwMode) -> bool {
        match mode {
            RwMode::Read => self.live.values().all(|s| s.what == RwMode::Read),
            RwMode::Write => self.live.is_empty(),
        }
    }

    /// The earliest expiry among the shares that block `mode`.
    fn blocked_until(&self, mode: RwMode) -> Option<Instant> {
        (self.live.values())
            .filter(|s| mode == RwMode::Write || s.what == RwMode::Write)
            .map(|s| s.expires_at)
            .min()
    }
}

/// A share the store granted.
struct Won {
    id: u64,
    token: FencingToken,
    revoked: Arc<Notify>,
}

impl MemoryStore {
    /// One attempt for `mode`: granted only when compatible with the holders
    /// and nobody is queued ahead (queue order: no writer starvation).
    fn try_share(
        &self,
        req: &AcquireRequest<'_>,
        mode: RwMode,
        me: &Queued,
        enqueue: bool,
    ) -> Attempt<Won> {
        let now = Instant::now();
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let rw = state.rwlocks.entry(req.key.clone()).or_default();
        rw.expire(now);
        if rw.admits(mode) && rw.my_turn(me) {
            let (token, revoked) = rw.grant(me, id, mode, now + req.ttl);
            return Attempt::Taken(Won { id, token, revoked });
        }
        let blocking = rw.blocked_until(mode);
        rw.blocked(me, enqueue, blocking)
    }

    fn leave_rw_queue(&self, key: &LockKey, id: u64) {
        if let Some(rw) = self.state().rwlocks.get_mut(key) {
            rw.leave(id);
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
        let live = |rw: &RwState| rw.live.contains_key(&id).then_some(id);
        holders::if_holder(state.rwlocks.get_mut(key), live, f)
    }

    /// The live shares of the read-write lock `key`.
    pub fn shares(&self, key: &LockKey) -> Vec<ShareInfo> {
        let mut state = self.state();
        holders::live_now(state.rwlocks.get_mut(key), |id, s| {
            ShareInfo::new(s.what, s.token, format!("client {id}"))
        })
    }

    /// Deletes every share of the read-write lock `key` behind its holders'
    /// backs; returns how many there were.
    pub fn delete_shares(&self, key: &LockKey) -> usize {
        let mut state = self.state();
        let Some(rw) = state.rwlocks.get_mut(key) else {
            return 0;
        };
        rw.expire(Instant::now());
        let ids: Vec<u64> = rw.live.keys().copied().collect();
        ids.into_iter().filter(|id| rw.remove(*id)).count()
    }

    fn rwlock_residue(&self, prefix: &str) -> Vec<String> {
        let mut state = self.state();
        holders::residue(state.rwlocks.iter_mut(), prefix, |id, mode| {
            format!("{mode} share {id}")
        })
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
        let (won, sent_at) = (network.queue_for(
            &req,
            |me, enqueue| Ok(store.try_share(&req, mode, me, enqueue)),
            |id| store.leave_rw_queue(req.key, id),
            |won| {
                store.if_share_holder(req.key, won.id, |rw, id| {
                    rw.remove(id);
                });
            },
        ))
        .await?;
        let handle = ShareHandle {
            network: network.clone(),
            key: req.key.clone(),
            id: won.id,
            revoked: won.revoked,
        };
        Ok(Acquired {
            handle,
            token: won.token,
            sent_at,
        })
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
