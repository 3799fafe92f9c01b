//! The NATS read-write lock: read shares, one write share and the queue of
//! waiting places of one name, all in the entry `rw.<escaped name>`.
//!
//! Invariants: the live holders are either readers only or one writer. A
//! writer is granted when no share lives and no place is queued before its
//! own; a reader when no writer holds and no writer's place is queued before
//! its own (a request without a place, `try_read`, counts every place as
//! before it). So readers arriving while a writer waits queue behind it (no
//! writer starvation) and writers arriving after a waiting reader queue
//! behind it (no reader starvation). A place is appended at the waiter's first
//! attempt and refreshed every third of its lifetime; a waiter that vanished
//! holds the queue no longer than that lifetime.

use super::contend::{self, Verdict};
use super::{NatsShare, Place, inspect};
use crate::backend::NatsBackend;
use crate::error::BACKEND;
use crate::share_entry::{Entry, Kind, Mode};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, BackendRwLock, RwLockBackend, RwLockInspect, ShareInfo,
};
use distlock_core::toolkit::random_owner;
use distlock_core::{Capabilities, LockError, LockKey, RwMode};
use std::sync::Arc;

/// A NATS read-write lock client, on the connection of a [`crate::NatsLock`]
/// (`lock.rwlock()`).
pub type NatsRwLock = BackendRwLock<NatsRwLockBackend>;

/// The NATS read-write lock adapter: every share and waiter of a name in one
/// KV entry.
#[derive(Debug)]
pub struct NatsRwLockBackend {
    backend: Arc<NatsBackend>,
}

impl NatsRwLockBackend {
    pub(crate) fn new(backend: Arc<NatsBackend>) -> Self {
        NatsRwLockBackend { backend }
    }

    fn place(&self, key: &LockKey) -> Place {
        Place::new(self.backend.clone(), Kind::RwLock, key)
    }

    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
        mode: Mode,
    ) -> Result<Acquired<NatsShare>, LockError> {
        let owner = req.meta.tag_owner(&random_owner());
        let place = self.place(req.key);
        let rule = |entry: &mut Entry, me: &str| Ok(rule(entry, me, mode));
        let (acquired, _) = contend::acquire(&place, &req, owner, rule).await?;
        Ok(acquired)
    }
}

/// The policy over a pruned entry, for `me` wanting `mode`.
fn rule(entry: &Entry, me: &str, mode: Mode) -> Verdict {
    let ahead: Vec<Mode> = (entry.members.iter())
        .take_while(|m| m.owner != me)
        .filter(|m| !m.holds)
        .map(|m| m.mode)
        .collect();
    let mut holders = entry.holders().filter(|m| m.owner != me);
    let free = match mode {
        Mode::Write => holders.next().is_none() && ahead.is_empty(),
        _ => holders.all(|m| m.mode != Mode::Write) && !ahead.contains(&Mode::Write),
    };
    if free {
        Verdict::Grant(mode, 0)
    } else {
        Verdict::Wait(Some(mode))
    }
}

#[async_trait]
impl RwLockBackend for NatsRwLockBackend {
    type Share = NatsShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        NatsBackend::CAPABILITIES
    }

    async fn acquire_read(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<NatsShare>, LockError> {
        self.acquire(req, Mode::Read).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<NatsShare>, LockError> {
        self.acquire(req, Mode::Write).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

#[async_trait]
impl RwLockInspect for NatsRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let mut shares: Vec<ShareInfo> = (self.place(key).holders().await?.into_iter())
            .map(|(m, token)| {
                let mode = match m.mode {
                    Mode::Write => RwMode::Write,
                    _ => RwMode::Read,
                };
                ShareInfo::new(mode, token, m.owner)
            })
            .collect();
        shares.sort_by_key(|s| s.token);
        Ok(shares)
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        self.place(key).remove_where(|m| m.holds).await
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        inspect::residue(&self.backend, Kind::RwLock, prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share_entry::Member;
    use std::time::Duration;

    fn entry(members: &[(bool, Mode, &str)]) -> Entry {
        let mut entry = Entry::empty(Kind::RwLock);
        for &(holds, mode, owner) in members {
            entry.members.push(Member {
                holds,
                mode,
                slot: 0,
                ttl: Duration::from_secs(1),
                renews: 0,
                granted: 1,
                owner: owner.to_owned(),
            });
        }
        entry
    }

    fn grants(entry: &Entry, me: &str, mode: Mode) -> bool {
        matches!(rule(entry, me, mode), Verdict::Grant(..))
    }

    #[test]
    fn arrival_order_decides_between_readers_and_writers() {
        use Mode::{Read, Write};
        let readers = entry(&[(true, Read, "r1"), (true, Read, "r2")]);
        assert!(grants(&readers, "new", Read), "readers share");
        assert!(
            !grants(&readers, "new", Write),
            "a writer waits for readers"
        );
        let writer_waits = entry(&[(true, Read, "r1"), (false, Write, "w"), (false, Read, "r")]);
        assert!(
            !grants(&writer_waits, "r", Read),
            "no reader overtakes a waiting writer"
        );
        assert!(
            !grants(&writer_waits, "new", Read),
            "nor does a try without a place"
        );
        let reader_first = entry(&[(false, Read, "r"), (false, Write, "w")]);
        assert!(grants(&reader_first, "r", Read));
        assert!(
            !grants(&reader_first, "w", Write),
            "a writer waits behind a reader"
        );
        let writer_holds = entry(&[(true, Write, "w")]);
        assert!(!grants(&writer_holds, "r", Read) && !grants(&writer_holds, "x", Write));
    }
}
