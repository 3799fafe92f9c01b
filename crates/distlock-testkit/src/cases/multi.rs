//! The conveniences over the lock API: `with_lock` (work run under a lock) and
//! `acquire_all` (several keys, all or nothing, in a canonical order).

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{DistributedLockExt, DynLock, Held, LockError, LockKey, LossReason, Wait};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A work error of the caller's own type, to see it come back untouched.
#[derive(Debug)]
enum WorkError {
    Lock(LockError),
    Refused(u32),
}

impl From<LockError> for WorkError {
    fn from(e: LockError) -> Self {
        WorkError::Lock(e)
    }
}

/// Sets its flag when dropped: tells whether a future was dropped mid-way.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Whether `client` gets `key` at once (the lease it gets is released).
async fn free_now(client: &DynLock, key: &LockKey, s: &Scope<'_>) -> Result<bool, CaseError> {
    match client.try_acquire(key, &s.long()).await? {
        Some(lease) => {
            lease.release().await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// `with_lock` holds the lock while the work runs, returns the work's value,
/// returns a work error as it is, and leaves the lock free either way.
pub async fn with_lock_releases_and_returns_the_work_result(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "with_lock_releases_and_returns_the_work_result");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let (other, probe, probe_opts) = (b.clone(), key.clone(), s.long());
    let (token, taken_meanwhile) = a
        .with_lock(&key, &s.long(), |lease| {
            let token = lease.token();
            async move {
                let stolen = other.try_acquire(&probe, &probe_opts).await?;
                Ok::<_, LockError>((token, stolen.is_some()))
            }
        })
        .await?;
    ensure!(
        !taken_meanwhile,
        "another client got the lock during the work"
    );
    let next = b
        .try_acquire(&key, &s.long())
        .await?
        .ok_or_else(|| CaseError::msg("the lock was not free after with_lock returned"))?;
    ensure!(
        next.token() > token,
        "token {} after with_lock must exceed the work's {token}",
        next.token()
    );
    next.release().await?;

    let failed = a
        .with_lock(&key, &s.long(), |_| async {
            Err::<(), _>(WorkError::Refused(7))
        })
        .await;
    ensure!(
        matches!(failed, Err(WorkError::Refused(7))),
        "a failing work gave {failed:?}, not its own error"
    );
    ensure!(
        free_now(&b, &key, &s).await?,
        "the lock was not free after the work failed"
    );

    // A lock that cannot be taken converts into the caller's error; no work runs.
    let held = b.acquire(&key, &s.long()).await?;
    let ran = Arc::new(AtomicBool::new(false));
    let work_ran = ran.clone();
    let busy = a
        .with_lock(&key, &s.long().wait(Wait::No), move |_| async move {
            work_ran.store(true, Ordering::SeqCst);
            Ok::<_, WorkError>(())
        })
        .await;
    ensure!(
        matches!(&busy, Err(WorkError::Lock(LockError::Busy { key: k, .. })) if *k == key),
        "with_lock on a held lock gave {busy:?}, not Busy as the work's error type"
    );
    ensure!(!ran.load(Ordering::SeqCst), "the work ran without the lock");
    held.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// An operator deletes the lock while `with_lock`'s work runs: the work is
/// dropped, `with_lock` gives `Lost`, and the lock can be taken again.
pub async fn with_lock_stops_work_on_loss(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "with_lock_stops_work_on_loss");
    let (a, c, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let (dropped, finished) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (task_key, opts) = (key.clone(), s.short());
    let (work_dropped, work_finished) = (dropped.clone(), finished.clone());
    let task = tokio::spawn(async move {
        a.with_lock(&task_key, &opts, move |_| async move {
            let _dropped = SetOnDrop(work_dropped);
            let _ = started_tx.send(());
            // Work that never ends on its own: only the loss can stop it.
            std::future::pending::<()>().await;
            work_finished.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await
    });
    within(Duration::from_secs(20), "the work to start", started_rx).await??;
    h.delete_lock(&key).await?;
    // Push backends tell at once; others at the next renewal (ttl/3).
    let outcome = within(
        s.short_ttl() + s.handoff_bound(),
        "with_lock after deletion",
        task,
    )
    .await??;
    match outcome {
        Err(LockError::Lost { key: k, reason }) => {
            ensure!(k == key, "Lost names {k}, not {key}");
            ensure!(
                matches!(reason, LossReason::Revoked | LossReason::SessionEnded),
                "lost for {reason:?}, expected Revoked or SessionEnded"
            );
        }
        other => {
            return Err(CaseError::msg(format!(
                "with_lock on a deleted lock gave {other:?}, not Lost"
            )));
        }
    }
    ensure!(dropped.load(Ordering::SeqCst), "the work was not dropped");
    ensure!(
        !finished.load(Ordering::SeqCst),
        "the work ran on after the loss"
    );
    let next = within(
        s.handoff_bound(),
        "acquire after the loss",
        c.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// One key held elsewhere: `acquire_all` with `Wait::No` fails `Busy` naming
/// it and holds none of the others; once it is free, every key is taken once
/// (duplicates removed), in sorted order, and released together.
pub async fn multi_lock_is_all_or_nothing(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "multi_lock_is_all_or_nothing");
    let (holder, multi, probe) = (s.client().await?, s.client().await?, s.client().await?);
    let (a, b, c) = (s.key("a")?, s.key("b")?, s.key("c")?);
    let asked = [c.clone(), a.clone(), b.clone(), a.clone()];
    let held = holder.acquire(&b, &s.long()).await?;
    match multi.acquire_all(&asked, &s.long().wait(Wait::No)).await {
        Err(LockError::Busy { key, .. }) => ensure!(key == b, "Busy names {key}, not {b}"),
        other => {
            return Err(CaseError::msg(format!(
                "acquire_all with one key held gave {other:?}, not Busy"
            )));
        }
    }
    // Checked at once: the keys taken were released before the error came back.
    for key in [&a, &c] {
        ensure!(
            free_now(&probe, key, &s).await?,
            "`{key}` stayed held after acquire_all failed"
        );
    }
    s.expect_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    let all = multi.acquire_all(&asked, &s.long().wait(Wait::No)).await?;
    let keys: Vec<&LockKey> = all.keys().collect();
    ensure!(
        keys == [&a, &b, &c],
        "members {keys:?}, expected a, b, c once each in order"
    );
    ensure!(all.is_held(), "a fresh multi-lease must be held");
    for key in [&a, &b, &c] {
        ensure!(
            !free_now(&probe, key, &s).await?,
            "`{key}` was free while the multi-lease held it"
        );
        ensure!(all.token(key).is_some(), "no token for `{key}`");
    }
    s.expect_residue(3, Duration::from_secs(5)).await?;
    all.release().await?;
    for key in [&a, &b, &c] {
        ensure!(
            free_now(&probe, key, &s).await?,
            "`{key}` stayed held after the multi-lease was released"
        );
    }
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// `Wait::For(d)` is one budget for the whole set: a key that needed part of
/// it leaves only the rest for the next.
pub async fn multi_lock_wait_is_one_budget(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "multi_lock_wait_is_one_budget");
    let (holder, multi, probe) = (s.client().await?, s.client().await?, s.client().await?);
    let (a, b) = (s.key("a")?, s.key("b")?);
    let held_a = holder.acquire(&a, &s.long()).await?;
    let held_b = holder.acquire(&b, &s.long()).await?;
    let budget = Duration::from_secs(2);
    // `a` frees up 60% into the budget; `b` never does.
    let freed = tokio::spawn(async move {
        tokio::time::sleep(budget * 3 / 5).await;
        held_a.release().await
    });
    let started = Instant::now();
    let outcome = multi
        .acquire_all(&[b.clone(), a.clone()], &s.long().wait(Wait::For(budget)))
        .await;
    let took = started.elapsed();
    match outcome {
        Err(LockError::Timeout { key, waited }) => {
            ensure!(key == b, "Timeout names {key}, not {b}");
            ensure!(
                waited >= took / 2,
                "Timeout says it waited {waited:?} of {took:?}"
            );
        }
        other => {
            return Err(CaseError::msg(format!(
                "acquire_all with a key held throughout gave {other:?}, not Timeout"
            )));
        }
    }
    within(Duration::from_secs(5), "the scheduled release", freed).await???;
    ensure!(
        took + Duration::from_millis(5) >= budget,
        "gave up early, after {took:?} of {budget:?}"
    );
    // Per-key budgets would take 1.2 s for `a` and then 2 s more for `b`.
    ensure!(
        took <= budget + Duration::from_millis(900),
        "gave up after {took:?}: the wait of {budget:?} is not one budget for the set"
    );
    ensure!(
        free_now(&probe, &a, &s).await?,
        "`a` stayed held after acquire_all timed out"
    );
    held_b.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// Two clients take `{a, b}` and `{b, a}` over and over with bounded waits:
/// the canonical order means every round completes, one at a time.
pub async fn multi_lock_opposite_orders_do_not_deadlock(h: &dyn Harness) -> CaseResult {
    const ROUNDS: usize = 10;
    let s = Scope::new(h, "multi_lock_opposite_orders_do_not_deadlock");
    let (a, b) = (s.key("a")?, s.key("b")?);
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for order in [[a.clone(), b.clone()], [b.clone(), a.clone()]] {
        let (client, inside) = (s.client().await?, inside.clone());
        let opts = s.long().wait(Wait::For(Duration::from_secs(10)));
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let both = client
                    .acquire_all(&order, &opts)
                    .await
                    .map_err(|e| CaseError::msg(format!("round {round} taking {order:?}: {e}")))?;
                ensure!(
                    inside.fetch_add(1, Ordering::SeqCst) == 0,
                    "two multi-leases on the same keys at once"
                );
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                both.release().await?;
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        within(Duration::from_secs(120), "the rounds", task).await???;
    }
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// An `acquire_all` dropped while it waits for its second key leaves nothing:
/// the first key is free at once, and the waiter delays nobody.
pub async fn cancelled_multi_lock_leaves_nothing(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "cancelled_multi_lock_leaves_nothing");
    let (holder, multi, probe) = (s.client().await?, s.client().await?, s.client().await?);
    let (a, b) = (s.key("a")?, s.key("b")?);
    let held = holder.acquire(&b, &s.long()).await?;
    let keys = [a.clone(), b.clone()];
    // Cancelled by a timeout around the future.
    let timed_out = tokio::time::timeout(
        Duration::from_millis(300),
        multi.acquire_all(&keys, &s.long()),
    )
    .await;
    ensure!(timed_out.is_err(), "acquire_all got a held key");
    // Cancelled by aborting the task it runs in, once it holds `a`.
    let (task_keys, opts, lock) = (keys.clone(), s.long(), multi.clone());
    let task = tokio::spawn(async move { lock.acquire_all(&task_keys, &opts).await.map(drop) });
    // Looked at through the inspector, which takes nothing itself.
    let inspector = h.inspector().await?;
    let inspect = inspector
        .inspect()
        .ok_or_else(|| CaseError::msg("the inspector offers no Inspect"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while inspect.holder(&a).await?.is_none() {
        ensure!(Instant::now() < deadline, "acquire_all never took `a`");
        ensure!(
            !task.is_finished(),
            "acquire_all finished while `b` was held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    ensure!(
        task.await.is_err_and(|e| e.is_cancelled()),
        "the aborted acquire_all finished instead"
    );
    let first = within(
        s.handoff_bound(),
        "acquire `a` after the cancelled acquire_all",
        probe.acquire(&a, &s.long()),
    )
    .await??;
    first.release().await?;
    s.expect_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    let second = within(
        s.handoff_bound(),
        "acquire `b` after the cancelled waiters",
        probe.acquire(&b, &s.long()),
    )
    .await??;
    second.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}
