//! Watching an election without campaigning (`LeaderElection::observe`): an
//! observer sees the state first, then each change in order, within the
//! backend's push or poll bound; a leader that dies without resigning is seen
//! gone by its expiry plus that bound.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{DynElection, Held, LeaderWatch, LockKey, SingleLease};
use std::time::{Duration, Instant};

/// The next item of `watch` within `bound`: an error item fails the case.
async fn next_state(
    watch: &mut LeaderWatch,
    bound: Duration,
    what: &str,
) -> Result<Option<(String, Option<distlock_core::FencingToken>)>, CaseError> {
    let item = within(bound, what, watch.next()).await?;
    let Some(item) = item else {
        return Err(CaseError::msg(format!("{what}: the watch ended")));
    };
    let leader = item.map_err(|e| CaseError::msg(format!("{what}: an error item: {e}")))?;
    Ok(leader.map(|l| (l.owner, l.token)))
}

/// Expects the next item to be the leader that `observer.leader()` shows
/// with `term`, or vacancy for `None`.
async fn expect(
    watch: &mut LeaderWatch,
    observer: &DynElection,
    key: &LockKey,
    term: Option<distlock_core::FencingToken>,
    bound: Duration,
    what: &str,
) -> CaseResult {
    let seen = next_state(watch, bound, what).await?;
    let Some(term) = term else {
        ensure!(seen.is_none(), "{what}: saw {seen:?}, expected vacancy");
        return Ok(());
    };
    let shown = observer.leader(key).await?.map(|l| (l.owner, l.token));
    ensure!(
        seen.is_some() && seen == shown && seen.as_ref().and_then(|s| s.1) == Some(term),
        "{what}: saw {seen:?}, expected term {term} as leader() shows it ({shown:?})"
    );
    Ok(())
}

/// vacant → leader A → A resigns: vacant → leader B → B resigns: vacant,
/// each item within the backend's hand-off bound and nothing in between (a
/// repeated state would show up as the wrong next item).
pub async fn election_observe_sees_changes(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_observe_sees_changes");
    let key = s.key("leader")?;
    let (a, b, observer) = (
        s.election().await?,
        s.election().await?,
        s.election().await?,
    );
    let bound = s.handoff_bound();
    let mut watch = observer.observe(&key);
    expect(&mut watch, &observer, &key, None, bound, "first state").await?;
    let leader_a = a.campaign(&key, "leader-a", &s.long()).await?;
    let term_a = Some(leader_a.token());
    expect(&mut watch, &observer, &key, term_a, bound, "leader A").await?;
    leader_a.release().await?;
    expect(&mut watch, &observer, &key, None, bound, "A resigned").await?;
    let leader_b = b.campaign(&key, "leader-b", &s.long()).await?;
    let term_b = Some(leader_b.token());
    expect(&mut watch, &observer, &key, term_b, bound, "leader B").await?;
    leader_b.release().await?;
    expect(&mut watch, &observer, &key, None, bound, "B resigned").await?;
    let quiet = tokio::time::timeout(bound, watch.next()).await;
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
    let key = s.key("leader")?;
    let (a, b, observer) = (
        s.election().await?,
        s.election().await?,
        s.election().await?,
    );
    let bound = s.handoff_bound();
    let mut watch = observer.observe(&key);
    expect(&mut watch, &observer, &key, None, bound, "first state").await?;
    let killed = a.campaign(&key, "killed", &s.short()).await?;
    let term = killed.token();
    expect(&mut watch, &observer, &key, Some(term), bound, "leader").await?;
    let killed_at = Instant::now();
    killed.abandon();
    let gone_by = s.short_ttl() + bound;
    let end = "the killed leader's end";
    expect(&mut watch, &observer, &key, None, gone_by, end).await?;
    let seen_after = killed_at.elapsed();
    let next = b.campaign(&key, "next", &s.long()).await?;
    expect(
        &mut watch,
        &observer,
        &key,
        Some(next.token()),
        bound,
        "the next leader",
    )
    .await?;
    next.release().await?;
    ensure!(
        seen_after <= gone_by,
        "seen {seen_after:?} after the kill, bound {gone_by:?}"
    );
    Ok(())
}
