//! The lost signal: it fires when the lock is gone, and only then.

use super::{CaseError, CaseResult, Scope, ensure, still_pending, within};
use crate::fault::Fault;
use crate::harness::Harness;
use distlock_core::{LockError, LossReason, Renewal, Wait};
use std::time::{Duration, Instant};

/// A lease whose lock was deleted and re-acquired by someone else can neither
/// release nor renew that holder's lock: the server compares the owner.
pub async fn release_by_non_owner_is_noop(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "release_by_non_owner_is_noop");
    let (a, b, c) = (s.client().await?, s.client().await?, s.client().await?);
    for op in ["release", "renew"] {
        let key = s.key(op)?;
        // Manual renewal and a long ttl: only the server's owner check can tell.
        let stale = a.acquire(&key, &s.long().renewal(Renewal::Manual)).await?;
        h.delete_lock(&key).await?;
        let fresh = within(
            s.handoff_bound() * 2,
            "acquire after deletion",
            b.acquire(&key, &s.long()),
        )
        .await??;
        ensure!(
            fresh.token() > stale.token(),
            "new holder's token not above the old"
        );
        let outcome = match op {
            "release" => stale.release().await,
            _ => stale.renew().await,
        };
        s.stays_held(&c, &key, Duration::from_millis(300)).await?;
        stale_gave_lost(
            &format!("{op} by a foreign lease"),
            &outcome,
            fresh.is_held(),
        )?;
        fresh.release().await?;
    }
    Ok(())
}

/// A stale holder's `op`, which gave `outcome`, must give `Lost` and must not
/// have ended the new holder's hold.
pub(super) fn stale_gave_lost<T: std::fmt::Debug>(
    op: &str,
    outcome: &Result<T, LockError>,
    new_holder_held: bool,
) -> CaseResult {
    ensure!(
        matches!(outcome, Err(LockError::Lost { .. })),
        "{op} gave {outcome:?}, not Lost"
    );
    ensure!(new_holder_held, "{op} ended the new holder's hold");
    Ok(())
}

/// Waits for `lost` of a hold cut off from the backend at `cut_at`: it must
/// fire for `Expired`, by the local deadline.
pub(super) async fn lost_by_partition(
    s: &Scope<'_>,
    cut_at: Instant,
    lost: impl std::future::Future<Output = LossReason>,
) -> CaseResult {
    let ttl = s.short_ttl();
    let reason = within(ttl * 2, "lost() during a partition", lost).await?;
    let lost_after = cut_at.elapsed();
    ensure!(
        reason == LossReason::Expired,
        "lost for {reason:?}, expected Expired"
    );
    // The last renewal went out before the cut, so the deadline is within one ttl
    // of it; the timer may fire a little late on a loaded machine.
    ensure!(
        lost_after <= ttl + Duration::from_millis(500),
        "lost() fired {lost_after:?} after the cut, ttl {ttl:?}"
    );
    Ok(())
}

/// Waits for `lost` of a hold an operator deleted: push backends tell at once,
/// others find out at the next renewal (ttl/3).
pub(super) async fn lost_by_deletion(
    s: &Scope<'_>,
    lost: impl std::future::Future<Output = LossReason>,
) -> CaseResult {
    let reason = within(
        s.short_ttl() + s.handoff_bound(),
        "lost() after deletion",
        lost,
    )
    .await?;
    ensure!(
        matches!(reason, LossReason::Revoked | LossReason::SessionEnded),
        "lost for {reason:?}, expected Revoked or SessionEnded"
    );
    Ok(())
}

/// An operator deleting the key makes `lost()` fire and `is_held()` false.
pub async fn lost_signal_on_external_deletion(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "lost_signal_on_external_deletion");
    let (a, key) = (s.client().await?, s.key("k")?);
    let lease = a.acquire(&key, &s.short()).await?;
    h.delete_lock(&key).await?;
    lost_by_deletion(&s, lease.lost()).await?;
    ensure!(!lease.is_held(), "lease still held after deletion");
    ensure!(
        matches!(lease.release().await, Err(LockError::Lost { .. })),
        "release after loss must give Lost"
    );
    Ok(())
}

/// With the backend unreachable, `lost()` fires by the local deadline, which is
/// before the server can give the lock away.
pub async fn lost_signal_on_partition(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "lost_signal_on_partition");
    let (faulty, other, key) = (h.faulty_client().await?, s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    let lease = faulty.lock.acquire(&key, &s.short()).await?;
    let cut_at = Instant::now();
    faulty.faults.set_fault(Fault::Blackhole).await;
    lost_by_partition(&s, cut_at, lease.lost()).await?;
    ensure!(!lease.is_held(), "partitioned lease still held");
    // Meanwhile the server still honours the lease until its own expiry.
    let next = within(
        ttl * 2 + s.handoff_bound(),
        "acquire by another client",
        other.acquire(&key, &s.long()),
    )
    .await??;
    faulty.faults.set_fault(Fault::None).await;
    drop(lease);
    next.release().await?;
    Ok(())
}

/// A normal release, and a drop, never fire `lost()`.
pub async fn no_lost_signal_on_release(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "no_lost_signal_on_release");
    let (a, key_a, key_b) = (s.client().await?, s.key("released")?, s.key("dropped")?);
    let ttl = s.short_ttl();
    let released = a.acquire(&key_a, &s.short()).await?;
    let dropped = a.acquire(&key_b, &s.short()).await?;
    let (lost_released, lost_dropped) = (released.lost(), dropped.lost());
    released.release().await?;
    drop(dropped);
    let watch = ttl * 2;
    let (quiet_a, quiet_b) = tokio::join!(
        still_pending(watch, lost_released),
        still_pending(watch, lost_dropped)
    );
    ensure!(quiet_a, "lost() fired after release");
    ensure!(quiet_b, "lost() fired after drop");
    Ok(())
}

/// If the acquire reply arrives after the ttl, the caller gets `Timeout`, never a
/// lease that is already dead; and the lock is free again afterwards.
pub async fn acquire_never_returns_expired_lease(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "acquire_never_returns_expired_lease");
    let (faulty, other, key) = (h.faulty_client().await?, s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    faulty.faults.set_fault(Fault::Delay(ttl + ttl / 2)).await;
    let opts = s.short().wait(Wait::For(ttl * 8));
    match faulty.lock.acquire(&key, &opts).await {
        Err(LockError::Timeout { .. }) => {}
        Err(e) if e.is_transient() => {}
        Ok(lease) => {
            return Err(CaseError::msg(format!(
                "acquire with replies delayed past the ttl returned a lease (held: {}, remaining {:?})",
                lease.is_held(),
                lease.remaining()
            )));
        }
        Err(e) => return Err(CaseError::msg(format!("unexpected error: {e}"))),
    }
    faulty.faults.set_fault(Fault::None).await;
    let next = within(
        ttl * 2 + s.handoff_bound(),
        "acquire after the late reply",
        other.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    Ok(())
}
