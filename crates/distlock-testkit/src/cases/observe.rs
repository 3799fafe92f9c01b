//! Watching an election without campaigning (`LeaderElection::observe`): an
//! observer sees the state first, then each change in order, within the
//! backend's push or poll bound; a leader that dies without resigning is seen
//! gone by its expiry plus that bound.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{DynElection, FencingToken, Held, LeaderWatch, LockKey, SingleLease};
use std::time::{Duration, Instant};

/// An observer's watch on one election, with what its items are checked
/// against.
struct Watched {
    watch: LeaderWatch,
    observer: DynElection,
    key: LockKey,
    /// How soon a change must show: the backend's hand-off bound.
    bound: Duration,
}

impl Watched {
    /// Two candidates' clients and a third client's watch on the election
    /// `leader`, whose first item must say the seat is vacant.
    async fn start(s: &Scope<'_>) -> Result<(DynElection, DynElection, Watched), CaseError> {
        let (a, b, observer) = (
            s.election().await?,
            s.election().await?,
            s.election().await?,
        );
        let key = s.key("leader")?;
        let mut watched = Watched {
            watch: observer.observe(&key),
            observer,
            key,
            bound: s.handoff_bound(),
        };
        watched.expect(None, watched.bound, "first state").await?;
        Ok((a, b, watched))
    }

    /// Expects the next item within `limit`: the leader of `term` as
    /// `leader()` shows it, or vacancy for `None`. An error item fails.
    async fn expect(
        &mut self,
        term: Option<FencingToken>,
        limit: Duration,
        what: &str,
    ) -> CaseResult {
        let item = within(limit, what, self.watch.next()).await?;
        let item = item.ok_or_else(|| CaseError::msg(format!("{what}: the watch ended")))?;
        let seen = item
            .map_err(|e| CaseError::msg(format!("{what}: an error item: {e}")))?
            .map(|l| (l.owner, l.token));
        let Some(term) = term else {
            ensure!(seen.is_none(), "{what}: saw {seen:?}, expected vacancy");
            return Ok(());
        };
        let shown = (self.observer.leader(&self.key).await?).map(|l| (l.owner, l.token));
        ensure!(
            seen.is_some() && seen == shown && seen.as_ref().and_then(|s| s.1) == Some(term),
            "{what}: saw {seen:?}, expected term {term} as leader() shows it ({shown:?})"
        );
        Ok(())
    }
}

/// vacant → leader A → A resigns: vacant → leader B → B resigns: vacant,
/// each item within the backend's hand-off bound and nothing in between (a
/// repeated state would show up as the wrong next item).
pub async fn election_observe_sees_changes(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_observe_sees_changes");
    let (a, b, mut w) = Watched::start(&s).await?;
    let bound = w.bound;
    let leader_a = a.campaign(&w.key, "leader-a", &s.long()).await?;
    w.expect(Some(leader_a.token()), bound, "leader A").await?;
    leader_a.release().await?;
    w.expect(None, bound, "A resigned").await?;
    let leader_b = b.campaign(&w.key, "leader-b", &s.long()).await?;
    w.expect(Some(leader_b.token()), bound, "leader B").await?;
    leader_b.release().await?;
    w.expect(None, bound, "B resigned").await?;
    let quiet = tokio::time::timeout(bound, w.watch.next()).await;
    ensure!(
        quiet.is_err(),
        "an item with nothing changed: {:?}",
        quiet.ok().flatten()
    );
    Ok(())
}

/// A leader that stops renewing without resigning (a killed process): the
/// observer sees its seat vacant by its ttl plus the backend's hand-off
/// bound, then the next leader.
pub async fn election_observe_sees_a_lost_leader(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_observe_sees_a_lost_leader");
    let (a, b, mut w) = Watched::start(&s).await?;
    let bound = w.bound;
    let killed = a.campaign(&w.key, "killed", &s.short()).await?;
    w.expect(Some(killed.token()), bound, "leader").await?;
    let killed_at = Instant::now();
    killed.abandon();
    let gone_by = s.short_ttl() + bound;
    w.expect(None, gone_by, "the killed leader's end").await?;
    let seen_after = killed_at.elapsed();
    let next = b.campaign(&w.key, "next", &s.long()).await?;
    w.expect(Some(next.token()), bound, "the next leader")
        .await?;
    next.release().await?;
    ensure!(
        seen_after <= gone_by,
        "seen {seen_after:?} after the kill, bound {gone_by:?}"
    );
    Ok(())
}
