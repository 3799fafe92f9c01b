//! The read-write lock: share rows in the share table `{table}_rw` (see
//! `shares`): the writer in slot 0, each reader in the lowest free slot from 1,
//! and a waiting writer's intent in [`INTENT_SLOT`], all expiring on the
//! server clock; the head row's counter gives every share its token.
//!
//! Invariants (each decided under the head lock):
//! - A writer takes slot 0 only when no share is live and no other writer's
//!   intent is: it excludes everyone.
//! - A reader takes a slot only when no writer holds and no other writer's
//!   intent is live: a waiting writer marks its intent (renewed with each
//!   poll, deleted when it wins or gives up, expiring after its ttl if it
//!   crashed), and readers arriving after it queue behind it, so a stream of
//!   readers cannot starve it.
//! - One counter per name: a write token exceeds every earlier share's.

use crate::error::BACKEND;
use crate::keys::{display_name, exact_range, prefix_range, row_name};
use crate::share_take::take;
use crate::shares::{Plan, ShareHandle, ShareRow, Shares, Taker, delete_live, live_rows};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::{
    Capabilities, FencingToken, LockError, LockKey, RwLockBackend, RwLockInspect, RwMode,
    ShareInfo, lowest_free_slot,
};
use std::sync::Arc;
use std::time::Duration;

/// The writer's slot.
const WRITER_SLOT: u32 = 0;
/// A waiting writer's intent.
const INTENT_SLOT: u32 = u32::MAX - 1;
/// How long a waiting writer's intent outlives its last poll (at most the
/// writer's ttl): a writer polls at least every 250 ms, so this only matters
/// for one that crashed while waiting, whose intent holds readers off no
/// longer than this.
const INTENT_TTL: Duration = Duration::from_secs(2);

/// The read-write lock of a MySQL client.
#[derive(Debug)]
pub(crate) struct MySqlRwLock {
    pub shares: Arc<Shares>,
}

/// One read or write request's rules.
struct Share {
    mode: RwMode,
    /// `Wait::No` marks no intent: a refused attempt leaves nothing.
    waits: bool,
    ttl: Duration,
}

impl Taker for Share {
    fn permits(&self) -> Option<u32> {
        None
    }

    fn plan(&self, rows: &[ShareRow], mine: &[u8]) -> Plan {
        let live = |row: &&ShareRow| row.live;
        let intent = rows
            .iter()
            .filter(live)
            .find(|row| row.slot == INTENT_SLOT && row.owner.as_deref() != Some(mine));
        let blocking: Vec<&ShareRow> = rows
            .iter()
            .filter(live)
            .filter(|row| match self.mode {
                RwMode::Read => row.slot == WRITER_SLOT,
                RwMode::Write => row.slot != INTENT_SLOT,
            })
            .chain(intent)
            .collect();
        if blocking.is_empty() {
            let slot = match self.mode {
                RwMode::Write => WRITER_SLOT,
                RwMode::Read => {
                    // Reader slots count from 1: slot `n` is index `n - 1`.
                    let taken = rows
                        .iter()
                        .filter(live)
                        .filter(|row| row.slot != INTENT_SLOT)
                        .filter_map(|row| row.slot.checked_sub(1));
                    match lowest_free_slot(INTENT_SLOT - 1, taken) {
                        Some(slot) => slot + 1,
                        None => {
                            return Plan::Refuse(LockError::backend(
                                BACKEND,
                                "every reader slot of this read-write lock is taken; release some",
                            ));
                        }
                    }
                }
            };
            return Plan::Take {
                slot,
                permits: None,
            };
        }
        let remaining = blocking
            .iter()
            .map(|row| row.remaining)
            .min()
            .unwrap_or(Duration::ZERO);
        let mark = (self.mode == RwMode::Write && self.waits && intent.is_none())
            .then_some((INTENT_SLOT, self.ttl.min(INTENT_TTL)));
        Plan::Wait { remaining, mark }
    }
}

impl MySqlRwLock {
    async fn acquire(
        &self,
        mode: RwMode,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        let share = Share {
            mode,
            waits: req.wait != WaitUntil::NoWait,
            ttl: req.ttl,
        };
        let (acquired, _) = take(&self.shares, &req, row_name(req.key), &share).await?;
        Ok(acquired)
    }
}

#[async_trait]
impl RwLockBackend for MySqlRwLock {
    type Share = ShareHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.shares.base.strategy.capabilities()
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        self.acquire(RwMode::Read, req).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<ShareHandle>, LockError> {
        self.acquire(RwMode::Write, req).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

#[async_trait]
impl RwLockInspect for MySqlRwLock {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let (low, high) = exact_range(&row_name(key));
        let found = live_rows(&self.shares, low, high).await?;
        Ok(found
            .into_iter()
            .filter(|(_, slot, _, _)| *slot != INTENT_SLOT)
            .map(|(_, slot, holder, fence)| ShareInfo {
                mode: match slot {
                    WRITER_SLOT => RwMode::Write,
                    _ => RwMode::Read,
                },
                token: FencingToken::new(fence),
                holder,
            })
            .collect())
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        let deleted =
            delete_live(&self.shares, &row_name(key), WRITER_SLOT, INTENT_SLOT - 1).await?;
        Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let (low, high) = prefix_range(prefix.as_bytes());
        let found = live_rows(&self.shares, low, high).await?;
        Ok(found
            .into_iter()
            .map(|(name, slot, _, _)| {
                let what = match slot {
                    WRITER_SLOT => "write".to_owned(),
                    INTENT_SLOT => "write intent".to_owned(),
                    reader => format!("read#{reader}"),
                };
                format!("{} {what}", display_name(&name))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shares::HEAD_SLOT;

    fn row(slot: u32, owner: &str, live: bool) -> ShareRow {
        ShareRow {
            slot,
            permits: None,
            owner: Some(owner.as_bytes().to_vec()),
            live,
            remaining: Duration::from_millis(if live { 700 } else { 0 }),
        }
    }

    fn share(mode: RwMode, waits: bool) -> Share {
        Share {
            mode,
            waits,
            ttl: Duration::from_secs(30),
        }
    }

    fn taken_slot(plan: Plan) -> Option<u32> {
        match plan {
            Plan::Take { slot, .. } => Some(slot),
            _ => None,
        }
    }

    #[test]
    fn readers_share_and_respect_another_writers_intent_only() {
        let head = row(HEAD_SLOT, "", false);
        let readers = [row(1, "r1", true), row(2, "r2", false), row(3, "r3", true)];
        let mut rows = vec![head];
        rows.extend(readers);
        let read = share(RwMode::Read, true);
        assert_eq!(
            taken_slot(read.plan(&rows, b"me")),
            Some(2),
            "lowest free reader slot"
        );
        rows.push(row(INTENT_SLOT, "w", true));
        assert!(
            taken_slot(read.plan(&rows, b"me")).is_none(),
            "a foreign intent blocks"
        );
        let write = share(RwMode::Write, true);
        match write.plan(&rows, b"w") {
            Plan::Wait { remaining, mark } => {
                assert_eq!(remaining, Duration::from_millis(700));
                assert_eq!(
                    mark,
                    Some((INTENT_SLOT, INTENT_TTL)),
                    "its own intent is renewed"
                );
            }
            other => panic!("a writer among readers planned {other:?}"),
        }
        match share(RwMode::Write, true).plan(&rows, b"other") {
            Plan::Wait { mark, .. } => assert_eq!(mark, None, "one intent at a time"),
            other => panic!("a second writer planned {other:?}"),
        }
    }

    #[test]
    fn a_writer_takes_slot_zero_only_alone_and_try_write_marks_nothing() {
        let expired = vec![row(0, "old", false), row(INTENT_SLOT, "gone", false)];
        let write = share(RwMode::Write, false);
        assert_eq!(taken_slot(write.plan(&expired, b"me")), Some(WRITER_SLOT));
        let held = vec![row(0, "w", true)];
        match write.plan(&held, b"me") {
            Plan::Wait { mark, .. } => assert_eq!(mark, None, "Wait::No leaves no intent"),
            other => panic!("try_write on a held lock planned {other:?}"),
        }
        assert!(taken_slot(share(RwMode::Read, true).plan(&held, b"me")).is_none());
    }
}
