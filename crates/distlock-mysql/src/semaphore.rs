//! The semaphore: one row per live permit in the share table
//! `{table}_sem`, under a head row that keeps the limit and the
//! fencing counter (see `shares`).
//!
//! Invariants: a name's limit is the head's `permits`, changed only while no
//! permit of it is live (otherwise `LimitMismatch`); a permit takes the lowest
//! slot in `0..limit` that has no live row, inside the transaction that holds
//! the head lock, so no two live permits share a slot and at most `limit` are
//! live.

use crate::error::BACKEND;
use crate::keys::{display_name, exact_range, prefix_range, row_name};
use crate::share_take::take;
use crate::shares::live_rows;
use crate::shares::{HEAD_SLOT, Plan, ShareHandle, ShareRow, Shares, Taker, delete_live};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquiredPermit, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect, lowest_free_slot,
};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use std::sync::Arc;
use std::time::Duration;

/// The semaphore of a MySQL client.
#[derive(Debug)]
pub(crate) struct MySqlSemaphore {
    pub shares: Arc<Shares>,
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
impl SemaphoreBackend for MySqlSemaphore {
    type Permit = ShareHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.shares.base.strategy.capabilities()
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<ShareHandle>, LockError> {
        let name = row_name(req.acquire.key);
        let (acquired, slot) =
            take(&self.shares, &req.acquire, name, &Permits { req: &req }).await?;
        Ok(AcquiredPermit { acquired, slot })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl SemaphoreInspect for MySqlSemaphore {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let (low, high) = exact_range(&row_name(key));
        let mut permits: Vec<PermitInfo> = live_rows(&self.shares, low, high)
            .await?
            .into_iter()
            .map(|(_, slot, holder, fence)| PermitInfo::new(slot, FencingToken::new(fence), holder))
            .collect();
        permits.sort_by_key(|permit| permit.slot);
        Ok(permits)
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        Ok(delete_live(&self.shares, &row_name(key), slot, slot).await? > 0)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let (low, high) = prefix_range(prefix.as_bytes());
        let found = live_rows(&self.shares, low, high).await?;
        Ok(found
            .into_iter()
            .map(|(name, slot, _, _)| format!("{}#{slot}", display_name(&name)))
            .collect())
    }
}
