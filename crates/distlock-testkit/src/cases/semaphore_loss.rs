//! Semaphore cases about ending permits: a crashed holder's permit frees at its
//! ttl and its slot is reused; `lost()` fires on deletion and on partition.

use super::loss::{lost_by_deletion, lost_by_partition, stale_gave_lost};
use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::fault::Fault;
use crate::harness::Harness;
use distlock_core::{Held, SingleLease, Wait};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A holder that stops renewing without releasing (a crash) keeps its permit
/// until its ttl, then the permit frees and its slot is handed out again.
pub async fn semaphore_crashed_holder_frees_after_ttl(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_crashed_holder_frees_after_ttl");
    let (a, b, key) = (s.semaphore().await?, s.semaphore().await?, s.key("sem")?);
    let ttl = s.short_ttl();
    let kept = a.acquire(&key, 2, &s.long()).await?;
    let crashed = a.acquire(&key, 2, &s.short()).await?;
    let crashed_slot = crashed.slot();
    crashed.abandon();
    let crashed_at = Instant::now();
    ensure!(
        b.try_acquire(&key, 2, &s.long()).await?.is_none(),
        "the crashed holder's permit was free before its ttl"
    );
    let opts = s.long().wait(Wait::For(ttl * 3));
    let next = b.acquire(&key, 2, &opts).await?;
    let freed_after = crashed_at.elapsed();
    ensure!(
        freed_after <= ttl + s.handoff_bound(),
        "the permit freed {freed_after:?} after the crash, ttl {ttl:?}"
    );
    ensure!(
        next.slot() == crashed_slot,
        "the expired slot {crashed_slot} was not reused (got {})",
        next.slot()
    );
    next.release().await?;
    kept.release().await?;
    s.expect_semaphore_residue(0, Duration::from_secs(5)).await
}

/// An operator deleting a permit makes its `lost()` fire and `is_held()` false;
/// its release then gives `Lost`, and the slot is free for others.
pub async fn semaphore_lost_on_external_deletion(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_lost_on_external_deletion");
    let (a, b, key) = (s.semaphore().await?, s.semaphore().await?, s.key("sem")?);
    let permit = a.acquire(&key, 1, &s.short()).await?;
    let inspect = b
        .inspect()
        .ok_or_else(|| CaseError::msg("the semaphore offers no inspection"))?;
    let live = inspect.permits(&key).await?;
    ensure!(
        live.len() == 1
            && live
                .iter()
                .all(|p| p.slot == permit.slot() && p.token == permit.token()),
        "inspection shows {live:?}, not the one permit held"
    );
    ensure!(
        inspect.delete_permit(&key, permit.slot()).await?,
        "the inspector found no permit to delete"
    );
    lost_by_deletion(&s, permit.lost()).await?;
    ensure!(!permit.is_held(), "permit still held after deletion");
    let next = b.acquire(&key, 1, &s.long()).await?;
    let outcome = permit.release().await;
    stale_gave_lost("release after loss", &outcome, next.is_held())?;
    next.release().await?;
    Ok(())
}

/// With the backend unreachable, a permit's `lost()` fires by its local
/// deadline, before the server hands the slot to another client.
pub async fn semaphore_lost_on_partition(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "semaphore_lost_on_partition");
    let faulty = h.faulty_client().await?;
    let sem = faulty
        .lock
        .semaphore()
        .ok_or_else(|| CaseError::msg("the faulty client offers no semaphore"))?;
    let (other, key) = (s.semaphore().await?, s.key("sem")?);
    let ttl = s.short_ttl();
    let permit = Arc::new(sem.acquire(&key, 1, &s.short()).await?);
    let cut_at = Instant::now();
    faulty.faults.set_fault(Fault::Blackhole).await;
    // The other client waits from the cut on. The moment it gets the permit,
    // the partitioned holder must already have stopped believing it holds it.
    let (waiter_key, opts) = (key.clone(), s.long().wait(Wait::For(ttl * 3)));
    let partitioned = permit.clone();
    let waiter = tokio::spawn(async move {
        let next = other.acquire(&waiter_key, 1, &opts).await;
        (partitioned.is_held(), next)
    });
    lost_by_partition(&s, cut_at, permit.lost()).await?;
    let (still_held, next) = within(ttl * 4, "the other client's acquire", waiter).await??;
    let next = next?;
    ensure!(
        !still_held,
        "another client got the permit while the partitioned holder still believed it held it"
    );
    faulty.faults.set_fault(Fault::None).await;
    drop(permit);
    next.release().await?;
    Ok(())
}
