//! The NATS semaphore: `limit` permits of one name in the entry
//! `sem.<escaped name>`, each holder in the lowest slot no live permit has.
//!
//! Invariant: after a contender's pruning, the entry's holders are the live
//! permits, fewer than `limit` of them when one is granted, in distinct slots.
//! The limit is stored with the permits: another limit is refused while any
//! permit lives, and goes with the last permit (the entry is deleted). Waiters
//! take no place: not FIFO, whoever writes first after a release wins.

use super::contend::{self, Verdict};
use super::{NatsShare, Place, inspect};
use crate::backend::NatsBackend;
use crate::error::BACKEND;
use crate::share_entry::{Entry, Kind, Mode};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquiredPermit, BackendSemaphore, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect,
};
use distlock_core::toolkit::random_owner;
use distlock_core::{Capabilities, LockError, LockKey};
use std::sync::Arc;

/// A NATS semaphore client, on the connection of a [`crate::NatsLock`]
/// (`lock.semaphore()`).
pub type NatsSemaphore = BackendSemaphore<NatsSemaphoreBackend>;

/// The NATS semaphore adapter: every permit of a name in one KV entry.
#[derive(Debug)]
pub struct NatsSemaphoreBackend {
    backend: Arc<NatsBackend>,
}

impl NatsSemaphoreBackend {
    pub(crate) fn new(backend: Arc<NatsBackend>) -> Self {
        NatsSemaphoreBackend { backend }
    }

    fn place(&self, key: &LockKey) -> Place {
        Place::new(self.backend.clone(), Kind::Semaphore, key)
    }
}

/// The semaphore's rule over a pruned entry: the limit must agree while
/// permits live; a permit is granted in the lowest free slot below it.
fn rule(req: &PermitRequest<'_>, entry: &mut Entry) -> Result<Verdict, LockError> {
    let slots: Vec<u32> = entry.holders().map(|m| m.slot).collect();
    if !slots.is_empty() && entry.limit != req.limit {
        return Err(req.mismatch(entry.limit));
    }
    entry.limit = req.limit;
    Ok(match (0..req.limit).find(|slot| !slots.contains(slot)) {
        Some(slot) => Verdict::Grant(Mode::Permit, slot),
        None => Verdict::Wait(None),
    })
}

#[async_trait]
impl SemaphoreBackend for NatsSemaphoreBackend {
    type Permit = NatsShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        NatsBackend::CAPABILITIES
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<NatsShare>, LockError> {
        let owner = req.acquire.meta.tag_owner(&random_owner());
        let place = self.place(req.acquire.key);
        let (acquired, slot) =
            contend::acquire(&place, &req.acquire, owner, |entry, _| rule(&req, entry)).await?;
        Ok(AcquiredPermit { acquired, slot })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl SemaphoreInspect for NatsSemaphoreBackend {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let mut permits: Vec<PermitInfo> = (self.place(key).holders().await?.into_iter())
            .map(|(m, token)| PermitInfo::new(m.slot, token, m.owner))
            .collect();
        permits.sort_by_key(|p| p.slot);
        Ok(permits)
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        let place = self.place(key);
        Ok(place.remove_where(|m| m.holds && m.slot == slot).await? > 0)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        inspect::residue(&self.backend, Kind::Semaphore, prefix).await
    }
}
