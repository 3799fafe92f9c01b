//! Election cases: one leader at a time over a recorded history with resigning,
//! killed and paused leaders; terms that strictly rise; a deposed leader's late
//! write refused by a fence; a withdrawn campaign that delays nobody.

use super::exclusion::late_write_refused;
use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::fault::{Fault, FaultControl};
use crate::harness::Harness;
use crate::history::{History, Section};
use distlock_core::{
    DynElection, Fence, FencedWrite, Held, Leadership, LockError, LockKey, MemoryFence, Renewal,
    SingleLease, Wait,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a leader's term ends in [`election_one_leader_at_a_time`].
#[derive(Debug, Clone, Copy)]
enum Ending {
    Resign,
    /// Stops renewing without resigning: a crashed process.
    Kill,
    /// Its network is cut until its leadership is lost, then restored.
    Pause,
}

/// Leads for a while, checking `is_held()` before each step; the section ends
/// at the last step that saw leadership held.
async fn lead(
    history: &History,
    candidate: usize,
    leadership: &Leadership,
    steps: usize,
) -> Result<(), CaseError> {
    let entered = Instant::now();
    let mut last_held = entered;
    for _ in 0..steps {
        let at = Instant::now();
        if !leadership.is_held() {
            break;
        }
        last_held = at;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    history.record(Section {
        key: leadership.key().clone(),
        token: leadership.token(),
        client: candidate,
        entered,
        left: last_held,
    });
    Ok(())
}

/// Campaigns, trying again on a transient error for up to two ttls: a
/// candidate back from a pause may find its session lapsed (etcd reports its
/// lease unavailable until it is replaced) and, like any real candidate loop,
/// campaigns again.
async fn campaign(
    election: &dyn distlock_core::LeaderElection,
    key: &LockKey,
    id: usize,
    opts: &distlock_core::AcquireOptions,
) -> Result<Leadership, LockError> {
    let give_up = Instant::now() + opts.get_ttl() * 2;
    loop {
        match election
            .campaign(key, &format!("candidate-{id}"), opts)
            .await
        {
            Err(e) if e.is_transient() && Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcome => return outcome,
        }
    }
}

/// One candidate's terms: campaign, lead, end as `endings` say.
async fn candidate(
    id: usize,
    election: DynElection,
    faults: Option<Arc<dyn FaultControl>>,
    key: LockKey,
    opts: distlock_core::AcquireOptions,
    endings: Vec<Ending>,
    history: Arc<History>,
) -> Result<(), CaseError> {
    for (term, ending) in endings.into_iter().enumerate() {
        let leadership = match campaign(&*election, &key, id, &opts).await {
            Ok(leadership) => leadership,
            Err(e) => {
                let leader = election.leader(&key).await;
                return Err(CaseError::msg(format!(
                    "candidate {id}, campaign {term} (to end by {ending:?}): {e} (leader now: {leader:?})"
                )));
            }
        };
        lead(&history, id, &leadership, 4).await?;
        match (ending, &faults) {
            (Ending::Pause, Some(faults)) => {
                faults.set_fault(Fault::Blackhole).await;
                let bound = opts.get_ttl() * 2;
                let lost = within(bound, "a paused leader's lost()", leadership.lost()).await;
                faults.set_fault(Fault::None).await;
                lost?;
                drop(leadership);
            }
            (Ending::Kill, _) | (Ending::Pause, None) => leadership.abandon(),
            (Ending::Resign, _) => leadership.release().await.map_err(|e| {
                CaseError::msg(format!("candidate {id}, resigning term {term}: {e}"))
            })?,
        }
    }
    Ok(())
}

/// Three candidates, each leading several terms that end by resigning, by
/// being killed, or (where the harness can fault a client) by a pause: the
/// recorded history never has two leaders at once, and terms rise.
pub async fn election_one_leader_at_a_time(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_one_leader_at_a_time");
    let key = s.key("leader")?;
    let history = Arc::new(History::new());
    let opts = s.short().wait(Wait::For(Duration::from_secs(60)));
    let mut tasks = Vec::new();
    for id in 0..3 {
        let (election, faults, endings) = match id {
            0 if h.hooks().faulty_client => {
                let faulty = h.faulty_client().await?;
                let election = faulty
                    .lock
                    .election()
                    .ok_or_else(|| CaseError::msg("the faulty client offers no election"))?;
                (
                    election,
                    Some(faulty.faults),
                    vec![Ending::Pause, Ending::Resign, Ending::Pause],
                )
            }
            1 => (
                s.election().await?,
                None,
                vec![Ending::Kill, Ending::Resign, Ending::Resign],
            ),
            _ => (
                s.election().await?,
                None,
                vec![Ending::Resign, Ending::Kill, Ending::Resign],
            ),
        };
        let (key, opts, history) = (key.clone(), opts.clone(), history.clone());
        tasks.push(tokio::spawn(candidate(
            id, election, faults, key, opts, endings, history,
        )));
    }
    for task in tasks {
        task.await??;
    }
    ensure!(
        history.len() == 9,
        "{} terms recorded, expected 9",
        history.len()
    );
    let violations = history.check();
    ensure!(
        violations.is_empty(),
        "two leaders at once or falling terms: {violations:?}"
    );
    Ok(())
}

/// Successive leaders' terms strictly rise, and observers see the current
/// leader with its term; after a resignation nobody leads.
pub async fn election_terms_strictly_rise(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_terms_strictly_rise");
    let (a, b, key) = (s.election().await?, s.election().await?, s.key("leader")?);
    let mut last = None;
    for (round, election) in [&a, &b, &a, &b].into_iter().enumerate() {
        let leadership = election
            .campaign(&key, &format!("round-{round}"), &s.long())
            .await?;
        ensure!(
            Some(leadership.token()) > last,
            "term {} after {last:?}",
            leadership.token()
        );
        last = Some(leadership.token());
        let seen = b.leader(&key).await?;
        ensure!(
            seen.as_ref().and_then(|l| l.token) == Some(leadership.token()),
            "observer saw {seen:?}, the leader's term is {}",
            leadership.token()
        );
        leadership.release().await?;
    }
    let after = a.leader(&key).await?;
    ensure!(
        after.is_none(),
        "a leader {after:?} after everyone resigned"
    );
    Ok(())
}

/// A leader that pauses past its ttl is deposed; the next leader's term is
/// higher, and the paused leader's late write is refused by a fence.
pub async fn election_paused_leader_write_refused_by_fence(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_paused_leader_write_refused_by_fence");
    let (a, b, key) = (s.election().await?, s.election().await?, s.key("leader")?);
    let fence = MemoryFence::new();
    let resource = key.as_str();
    // Manual renewal: a paused process cannot renew.
    let paused = a
        .campaign(&key, "paused", &s.short().renewal(Renewal::Manual))
        .await?;
    fence
        .write(resource, paused.token(), FencedWrite::set("paused"))
        .await?;
    let fresh = b.campaign(&key, "fresh", &s.long()).await?;
    ensure!(
        !paused.is_held(),
        "the paused leader still believes it leads"
    );
    ensure!(
        fresh.token() > paused.token(),
        "term {} not above {}",
        fresh.token(),
        paused.token()
    );
    late_write_refused(&fence, resource, paused.token(), fresh.token()).await?;
    fresh.release().await?;
    Ok(())
}

/// A campaign cancelled by a timeout or an abort, and one whose bounded wait
/// ends, leave nothing that delays the next candidate after the leader resigns.
pub async fn election_cancelled_campaign_delays_nobody(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "election_cancelled_campaign_delays_nobody");
    let key = s.key("leader")?;
    let (a, b, c) = (
        s.election().await?,
        s.election().await?,
        s.election().await?,
    );
    let leader = a.campaign(&key, "leader", &s.long()).await?;
    let timed_out =
        tokio::time::timeout(Duration::from_millis(300), b.campaign(&key, "b", &s.long())).await;
    ensure!(timed_out.is_err(), "a second leader was elected");
    let bounded = b
        .campaign(
            &key,
            "b",
            &s.long().wait(Wait::For(Duration::from_millis(300))),
        )
        .await;
    ensure!(
        matches!(bounded, Err(LockError::Timeout { .. })),
        "a bounded campaign gave {bounded:?}"
    );
    let (task_key, opts) = (key.clone(), s.long());
    let task = tokio::spawn(async move { b.campaign(&task_key, "b", &opts).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    ensure!(
        task.await.is_err_and(|e| e.is_cancelled()),
        "aborted campaign finished instead"
    );
    leader.release().await?;
    let next = within(
        s.handoff_bound(),
        "campaign after cancelled ones",
        c.campaign(&key, "c", &s.long()),
    )
    .await??;
    next.release().await?;
    Ok(())
}
