//! Semaphore cases: at most `limit` live permits, slots unique among them and
//! reused, agreement on the limit, prompt and clean waiting.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::adapter::MAX_PERMITS;
use distlock_core::{DynSemaphore, Held, LockError, Permit, SingleLease, Wait};
use std::collections::BTreeSet;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The slots of `permits`, sorted.
fn slots(permits: &[Permit]) -> Vec<u32> {
    let mut slots: Vec<u32> = permits.iter().map(Permit::slot).collect();
    slots.sort_unstable();
    slots
}

/// `limit` permits are taken with distinct slots in `0..limit`, one more is
/// refused, a released permit is taken again with a higher token, and limits
/// outside `1..=MAX_PERMITS` are refused.
pub async fn semaphore_acquire_release_basic(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_acquire_release_basic");
    let (a, b, key) = (s.semaphore().await?, s.semaphore().await?, s.key("sem")?);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(a.acquire(&key, 3, &s.long()).await?);
    }
    ensure!(
        slots(&held) == [0, 1, 2],
        "slots {:?}, not 0..3",
        slots(&held)
    );
    ensure!(
        b.try_acquire(&key, 3, &s.long()).await?.is_none(),
        "a fourth permit of three was granted"
    );
    let highest = held.iter().map(Permit::token).max();
    let freed = held.remove(1);
    freed.release().await?;
    let again = b.acquire(&key, 3, &s.long()).await?;
    ensure!(
        again.slot() == 1,
        "the freed slot 1 was not reused (got {})",
        again.slot()
    );
    ensure!(
        Some(again.token()) > highest,
        "token {} not above earlier ones",
        again.token()
    );
    for limit in [0, MAX_PERMITS + 1] {
        let refused = a.acquire(&key, limit, &s.long()).await;
        ensure!(
            matches!(refused, Err(LockError::InvalidOptions { .. })),
            "limit {limit} gave {refused:?}, not InvalidOptions"
        );
    }
    again.release().await?;
    for permit in held {
        permit.release().await?;
    }
    s.expect_semaphore_residue(0, Duration::from_secs(5)).await
}

/// K clients × M rounds on a limit of 3: an in-test counter never sees more than
/// 3 holders, no two live permits share a slot, and the limit is reached.
pub async fn semaphore_limit_never_exceeded_under_contention(h: &dyn Harness) -> CaseResult {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 8;
    const LIMIT: u32 = 3;
    let s = Scope::new(h, "semaphore_limit_never_exceeded_under_contention");
    let key = s.key("sem")?;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let live = Arc::new(Mutex::new(BTreeSet::new()));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let sem = s.semaphore().await?;
        let (key, opts) = (
            key.clone(),
            s.long().wait(Wait::For(Duration::from_secs(60))),
        );
        let (inside, most, live) = (inside.clone(), most.clone(), live.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit = sem.acquire(&key, LIMIT, &opts).await?;
                let now = inside.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                let fresh = live.lock().is_ok_and(|mut l| l.insert(permit.slot()));
                if now > LIMIT as usize || !fresh || permit.slot() >= LIMIT {
                    return Err(CaseError::msg(format!(
                        "{now} holders inside, slot {} (fresh: {fresh})",
                        permit.slot()
                    )));
                }
                // Until `LIMIT` holders have overlapped once, a holder stays
                // inside (bounded): whether the limit is ever reached must not
                // depend on how fast the backend hands a permit over.
                let filled_by = Instant::now() + Duration::from_secs(10);
                while most.load(SeqCst) < LIMIT as usize && Instant::now() < filled_by {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                if let Ok(mut l) = live.lock() {
                    l.remove(&permit.slot());
                }
                inside.fetch_sub(1, SeqCst);
                permit.release().await?;
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let most = most.load(SeqCst);
    ensure!(
        most == LIMIT as usize,
        "at most {most} holders at once; the limit {LIMIT} was never used"
    );
    s.expect_semaphore_residue(0, Duration::from_secs(5)).await
}

/// Clients that disagree on the limit get `LimitMismatch` while permits are
/// held; once none is, a new limit is accepted.
pub async fn semaphore_limit_mismatch_is_an_error(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_limit_mismatch_is_an_error");
    let (a, b, key) = (s.semaphore().await?, s.semaphore().await?, s.key("sem")?);
    let held = a.acquire(&key, 2, &s.long()).await?;
    for other in [1, 3] {
        let refused = b.acquire(&key, other, &s.long()).await;
        ensure!(
            matches!(refused, Err(LockError::LimitMismatch { requested, existing: 2, .. }) if requested == other),
            "limit {other} against 2 gave {refused:?}, not LimitMismatch"
        );
    }
    let agreed = b.acquire(&key, 2, &s.long()).await?;
    agreed.release().await?;
    held.release().await?;
    let changed = b.acquire(&key, 5, &s.long()).await?;
    changed.release().await?;
    Ok(())
}

/// A waiter for a full semaphore gets the permit freed by a release within the
/// backend's hand-off bound, in the freed slot.
pub async fn semaphore_waiter_wakes_promptly(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_waiter_wakes_promptly");
    let (a, b, key) = (s.semaphore().await?, s.semaphore().await?, s.key("sem")?);
    let first = a.acquire(&key, 2, &s.long()).await?;
    let second = a.acquire(&key, 2, &s.long()).await?;
    let (waiter_key, opts) = (key.clone(), s.long());
    let waiter = tokio::spawn(async move {
        let permit = b.acquire(&waiter_key, 2, &opts).await;
        (Instant::now(), permit)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "a waiter got a permit of a full semaphore"
    );
    let freed = first.slot();
    let released_at = Instant::now();
    first.release().await?;
    let (acquired_at, permit) = within(Duration::from_secs(10), "waiter", waiter).await??;
    let permit = permit?;
    let handoff = acquired_at - released_at;
    ensure!(
        handoff <= s.handoff_bound(),
        "hand-off took {handoff:?}, bound {:?}",
        s.handoff_bound()
    );
    ensure!(
        permit.slot() == freed,
        "waiter got slot {}, the freed one was {freed}",
        permit.slot()
    );
    permit.release().await?;
    second.release().await?;
    Ok(())
}

/// Dropped and timed-out waits leave no permit or queue entry, and the next
/// waiter is not delayed by them.
pub async fn semaphore_cancelled_wait_leaves_no_residue(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_cancelled_wait_leaves_no_residue");
    let key = s.key("sem")?;
    let (a, b, c, d) = (
        s.semaphore().await?,
        s.semaphore().await?,
        s.semaphore().await?,
        s.semaphore().await?,
    );
    let held = a.acquire(&key, 1, &s.long()).await?;
    let timed_out =
        tokio::time::timeout(Duration::from_millis(300), b.acquire(&key, 1, &s.long())).await;
    ensure!(
        timed_out.is_err(),
        "a waiter got the permit of a full semaphore"
    );
    let bounded = c
        .acquire(
            &key,
            1,
            &s.long().wait(Wait::For(Duration::from_millis(300))),
        )
        .await;
    ensure!(
        matches!(bounded, Err(LockError::Timeout { .. })),
        "a bounded wait gave {bounded:?}"
    );
    let (task_key, opts) = (key.clone(), s.long());
    let task = tokio::spawn(async move { c.acquire(&task_key, 1, &opts).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    ensure!(
        task.await.is_err_and(|e| e.is_cancelled()),
        "aborted waiter finished instead"
    );
    s.expect_semaphore_residue(1, Duration::from_secs(5))
        .await?;
    held.release().await?;
    let next = within(
        s.handoff_bound(),
        "acquire after cancelled waiters",
        d.acquire(&key, 1, &s.long()),
    )
    .await??;
    next.release().await?;
    s.expect_semaphore_residue(0, Duration::from_secs(5)).await
}

impl Scope<'_> {
    /// Waits until the semaphore residue (permits and queue entries) under this
    /// case's prefix is `expected`, failing at `within`.
    pub async fn expect_semaphore_residue(&self, expected: usize, within: Duration) -> CaseResult {
        let sem: DynSemaphore = self.semaphore().await?;
        let Some(inspect) = sem.inspect() else {
            return Err(CaseError::msg(format!(
                "{} semaphore offers no inspection",
                sem.name()
            )));
        };
        self.poll_residue("semaphore", expected, within, || {
            inspect.residue(self.prefix())
        })
        .await
    }
}
