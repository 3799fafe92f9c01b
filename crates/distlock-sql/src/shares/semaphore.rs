//! The semaphore: one row per live permit in the share table
//! `{table}_sem`, under a head row that keeps the limit and the
//! fencing counter (see the parent module).
//!
//! Invariants: a name's limit is the head's `permits`, changed only while no
//! permit of it is live (otherwise `LimitMismatch`); a permit takes the lowest
//! slot in `0..limit` that has no live row, inside the transaction that holds
//! the head lock, so no two live permits share a slot and at most `limit` are
//! live.

use super::{HEAD_SLOT, Names, Plan, ShareAdapter, ShareHandle, ShareRow, Shares, Taker};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquiredPermit, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect, lowest_free_slot,
};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use std::sync::Arc;
use std::time::Duration;

/// The semaphore of an SQL client.
#[derive(Debug)]
pub struct SqlSemaphore<A: ShareAdapter> {
    /// Its share table.
    pub shares: Arc<Shares<A>>,
}

/// A permit request's rules.
struct Permits<'a> {
    req: &'a PermitRequest<'a>,
}

impl Taker for Permits<'_> {
    fn permits(&self) -> Option<u32> {
        Some(self.req.limit)
    }

    fn plan(&self, rows: &[ShareRow], _mine: &[u8]) -> Plan {
        let limit = self.req.limit;
        let existing = rows
            .iter()
            .find(|row| row.slot == HEAD_SLOT)
            .and_then(|head| head.permits);
        let live: Vec<&ShareRow> = rows.iter().filter(|row| row.live).collect();
        let reset = existing != Some(limit);
        if reset && !live.is_empty() {
            return Plan::Refuse(self.req.mismatch(existing.unwrap_or(0)));
        }
        match lowest_free_slot(limit, live.iter().map(|row| row.slot)) {
            Some(slot) => Plan::Take {
                slot,
                permits: reset.then_some(limit),
            },
            None => Plan::Wait {
                remaining: live
                    .iter()
                    .map(|row| row.remaining)
                    .min()
                    .unwrap_or(Duration::ZERO),
                mark: None,
            },
        }
    }
}

#[async_trait]
impl<A: ShareAdapter> SemaphoreBackend for SqlSemaphore<A> {
    type Permit = ShareHandle<A>;

    fn name(&self) -> &'static str {
        self.shares.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.shares.base.capabilities()
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<ShareHandle<A>>, LockError> {
        let permits = Permits { req: &req };
        let (acquired, slot) = self.shares.take(&req.acquire, &permits).await?;
        Ok(AcquiredPermit { acquired, slot })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl<A: ShareAdapter> SemaphoreInspect for SqlSemaphore<A> {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let found = self.shares.live_rows(Names::One(key)).await?;
        let mut permits: Vec<PermitInfo> = found
            .into_iter()
            .map(|row| PermitInfo::new(row.slot, FencingToken::new(row.fence), row.owner))
            .collect();
        permits.sort_by_key(|permit| permit.slot);
        Ok(permits)
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        Ok(self.shares.delete_live(key, slot, slot).await? > 0)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let found = self.shares.live_rows(Names::Under(prefix)).await?;
        Ok(found
            .into_iter()
            .map(|row| format!("{}#{}", row.name, row.slot))
            .collect())
    }
}
