//! The read-write lock: share rows in the share table `{table}_rw` (see the
//! parent module): the writer in slot 0, each reader in the lowest free slot from 1,
//! and each waiter's place in the queue in a slot from `QUEUE_FIRST`, all
//! expiring on the server clock; the head row's counter gives every share its
//! token and every place its arrival ticket.
//!
//! Invariants (each decided under the head lock):
//! - Arrival order: a waiter's place keeps the ticket of its first attempt
//!   (renewed with its polls, deleted when it wins or gives up, expiring soon
//!   after the last poll of a waiter that crashed), and a request with no
//!   place yet arrives after every live place.
//! - A writer takes slot 0 only when no share is live and nobody arrived
//!   before it: it excludes everyone, and a stream of readers cannot starve it.
//! - A reader takes a slot only when no writer holds and no writer arrived
//!   before it: it shares with readers, and a stream of writers (always one
//!   waiting) cannot starve it.
//! - One counter per name: a write token exceeds every earlier share's.

use super::{HEAD_SLOT, Mark, Names, Plan, ShareAdapter, ShareHandle, ShareRow, Shares, Taker};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, RwLockBackend, RwLockInspect, ShareInfo, WaitUntil, lowest_free_slot,
};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey, RwMode};
use std::sync::Arc;
use std::time::Duration;

/// The writer's slot.
const WRITER_SLOT: u32 = 0;
/// The first slot of waiters' places, above every reader's: a waiting writer's
/// are even, a waiting reader's odd.
const QUEUE_FIRST: u32 = 1 << 31;
/// How long a waiter's place outlives its last renewal: the request's ttl,
/// kept within these bounds. A waiter polls at least every 250 ms and renews
/// its place once half of this is gone, so it keeps its place through a stall
/// of up to half the floor; the ceiling bounds how long one that crashed while
/// waiting holds up those behind it.
const PLACE_TTL: Duration = Duration::from_secs(2);
/// See [`PLACE_TTL`].
const PLACE_TTL_FLOOR: Duration = Duration::from_secs(1);

/// What a row of a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Writer,
    Reader,
    /// A waiter's place, and what it waits for.
    Waiting(RwMode),
    Head,
}

fn slot_kind(slot: u32) -> Slot {
    match slot {
        WRITER_SLOT => Slot::Writer,
        HEAD_SLOT => Slot::Head,
        s if s < QUEUE_FIRST => Slot::Reader,
        s if s % 2 == 0 => Slot::Waiting(RwMode::Write),
        _ => Slot::Waiting(RwMode::Read),
    }
}

/// The read-write lock of an SQL client.
#[derive(Debug)]
pub struct SqlRwLock<A: ShareAdapter> {
    /// Its share table.
    pub shares: Arc<Shares<A>>,
}

/// One read or write request's rules.
struct Share {
    /// The backend's name, for errors.
    backend: &'static str,
    mode: RwMode,
    /// `Wait::No` takes no place: a refused attempt leaves nothing.
    waits: bool,
    ttl: Duration,
}

impl Share {
    /// Whether `row` (live, someone else's) keeps this request out, given its
    /// arrival ticket (`None`: it has no place yet, so it came last).
    fn blocked_by(&self, row: &ShareRow, ticket: Option<u64>) -> bool {
        let earlier = ticket.is_none_or(|mine| row.fence < mine);
        match (self.mode, slot_kind(row.slot)) {
            (_, Slot::Head) => false,
            (RwMode::Write, Slot::Writer | Slot::Reader) => true,
            (RwMode::Write, Slot::Waiting(_)) => earlier,
            (RwMode::Read, Slot::Writer) => true,
            (RwMode::Read, Slot::Waiting(RwMode::Write)) => earlier,
            (RwMode::Read, Slot::Reader | Slot::Waiting(RwMode::Read)) => false,
        }
    }

    /// The slot to take when nothing blocks.
    fn free_slot(&self, live: &[&ShareRow]) -> Plan {
        let slot = match self.mode {
            RwMode::Write => WRITER_SLOT,
            RwMode::Read => {
                // Reader slots count from 1: slot `n` is index `n - 1`.
                let taken = live
                    .iter()
                    .filter(|row| slot_kind(row.slot) == Slot::Reader)
                    .map(|row| row.slot - 1);
                match lowest_free_slot(QUEUE_FIRST - 1, taken) {
                    Some(index) => index + 1,
                    None => {
                        return Plan::Refuse(LockError::backend(
                            self.backend,
                            "every reader slot of this read-write lock is taken; release some",
                        ));
                    }
                }
            }
        };
        Plan::Take {
            slot,
            permits: None,
        }
    }

    /// This waiter's place: a new one in the lowest free slot of its kind, or
    /// its own renewed once half its life is gone (until then a poll commits
    /// nothing, and may skip the head lock).
    fn place(&self, live: &[&ShareRow], own: Option<&ShareRow>) -> Option<Mark> {
        let ttl = self.ttl.clamp(PLACE_TTL_FLOOR, PLACE_TTL);
        if let Some(own) = own {
            return (own.remaining < ttl / 2).then_some(Mark {
                slot: own.slot,
                ttl,
                ticket: Some(own.fence),
            });
        }
        let parity = match self.mode {
            RwMode::Write => 0,
            RwMode::Read => 1,
        };
        let taken = live
            .iter()
            .filter(|row| slot_kind(row.slot) == Slot::Waiting(self.mode))
            .map(|row| (row.slot - QUEUE_FIRST) / 2);
        let index = lowest_free_slot((HEAD_SLOT - QUEUE_FIRST) / 2, taken)?;
        Some(Mark {
            slot: QUEUE_FIRST + index * 2 + parity,
            ttl,
            ticket: None,
        })
    }
}

impl Taker for Share {
    fn permits(&self) -> Option<u32> {
        None
    }

    fn plan(&self, rows: &[ShareRow], mine: &[u8]) -> Plan {
        let live: Vec<&ShareRow> = rows
            .iter()
            .filter(|row| row.live && slot_kind(row.slot) != Slot::Head)
            .collect();
        let (own, others): (Vec<&ShareRow>, Vec<&ShareRow>) = live
            .iter()
            .partition(|row| row.owner.as_deref() == Some(mine));
        let own = own
            .into_iter()
            .find(|row| matches!(slot_kind(row.slot), Slot::Waiting(_)));
        let ticket = own.map(|row| row.fence);
        let blocking: Vec<&ShareRow> = others
            .into_iter()
            .filter(|row| self.blocked_by(row, ticket))
            .collect();
        if blocking.is_empty() {
            return self.free_slot(&live);
        }
        let remaining = blocking
            .iter()
            .map(|row| row.remaining)
            .min()
            .unwrap_or(Duration::ZERO);
        let mark = self.waits.then(|| self.place(&live, own)).flatten();
        Plan::Wait { remaining, mark }
    }
}

impl<A: ShareAdapter> SqlRwLock<A> {
    async fn acquire(
        &self,
        mode: RwMode,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle<A>>, LockError> {
        let share = Share {
            backend: self.shares.backend(),
            mode,
            waits: req.wait != WaitUntil::No,
            ttl: req.ttl,
        };
        let (acquired, _) = self.shares.take(&req, &share).await?;
        Ok(acquired)
    }
}

#[async_trait]
impl<A: ShareAdapter> RwLockBackend for SqlRwLock<A> {
    type Share = ShareHandle<A>;

    fn name(&self) -> &'static str {
        self.shares.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.shares.base.capabilities()
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle<A>>, LockError> {
        self.acquire(RwMode::Read, req).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle<A>>, LockError> {
        self.acquire(RwMode::Write, req).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

#[async_trait]
impl<A: ShareAdapter> RwLockInspect for SqlRwLock<A> {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let found = self.shares.live_rows(Names::One(key)).await?;
        Ok(found
            .into_iter()
            .filter_map(|row| {
                let mode = match slot_kind(row.slot) {
                    Slot::Writer => RwMode::Write,
                    Slot::Reader => RwMode::Read,
                    Slot::Waiting(_) | Slot::Head => return None,
                };
                Some(ShareInfo::new(
                    mode,
                    FencingToken::new(row.fence),
                    row.owner,
                ))
            })
            .collect())
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        let deleted = self
            .shares
            .delete_live(key, WRITER_SLOT, QUEUE_FIRST - 1)
            .await?;
        Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let found = self.shares.live_rows(Names::Under(prefix)).await?;
        Ok(found
            .into_iter()
            .map(|row| {
                let slot = row.slot;
                let what = match slot_kind(slot) {
                    Slot::Writer => "write".to_owned(),
                    Slot::Reader => format!("read#{slot}"),
                    Slot::Waiting(mode) => format!("waiting {mode}"),
                    Slot::Head => "head".to_owned(),
                };
                format!("{} {what}", row.name)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
