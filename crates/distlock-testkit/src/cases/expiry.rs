//! Time: ttl expiry, renewal, max hold, and tokens across a server restart.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{LockError, LossReason, Renewal, Wait};
use std::time::{Duration, Instant};

/// A expires, B acquires, A's release reports the loss and leaves B's lock intact.
pub async fn stale_release_after_takeover_is_noop(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "stale_release_after_takeover_is_noop");
    let (a, b, c, key) = (
        s.client().await?,
        s.client().await?,
        s.client().await?,
        s.key("k")?,
    );
    let stale = a.acquire(&key, &s.short().renewal(Renewal::Manual)).await?;
    let fresh = b.acquire(&key, &s.long()).await?;
    match stale.release().await {
        Err(LockError::Lost { .. }) => {}
        other => {
            return Err(CaseError::msg(format!(
                "release after takeover gave {other:?}, not Lost"
            )));
        }
    }
    s.stays_held(&c, &key, Duration::from_millis(300)).await?;
    ensure!(fresh.is_held(), "the new holder lost its lease");
    fresh.release().await?;
    Ok(())
}

/// A holder that vanishes without releasing frees the lock within ttl + slack.
pub async fn ttl_expiry_frees_lock_after_crash(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "ttl_expiry_frees_lock_after_crash");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    let crashed = a.acquire(&key, &s.short()).await?;
    let token = crashed.token();
    let crashed_at = Instant::now();
    crashed.abandon();
    let next = b.acquire(&key, &s.long()).await?;
    let waited = crashed_at.elapsed();
    let bound = ttl + s.handoff_bound();
    ensure!(
        waited <= bound,
        "lock freed {waited:?} after the crash, bound {bound:?}"
    );
    ensure!(
        next.token() > token,
        "token {} not above the crashed holder's {token}",
        next.token()
    );
    next.release().await?;
    Ok(())
}

/// An auto-renewed lease stays held for 3 × ttl and contenders stay out.
pub async fn renewal_keeps_lock_past_ttl(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "renewal_keeps_lock_past_ttl");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    let lease = a.acquire(&key, &s.short()).await?;
    let lost = lease.lost();
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        ensure!(
            lease.is_held(),
            "auto-renewed lease dropped before 3 × ttl ({ttl:?})"
        );
        ensure!(
            b.try_acquire(&key, &s.long()).await?.is_none(),
            "contender got an auto-renewed lock"
        );
        tokio::time::sleep(ttl / 5).await;
    }
    ensure!(lease.is_held(), "lease not held after 3 × ttl");
    ensure!(
        super::still_pending(Duration::ZERO, lost).await,
        "lost() fired on a renewed lease"
    );
    lease.release().await?;
    Ok(())
}

/// With manual renewal a lease lasts one ttl per renew, then `lost()` fires.
pub async fn manual_renewal_and_expiry(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "manual_renewal_and_expiry");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    let lease = a.acquire(&key, &s.short().renewal(Renewal::Manual)).await?;
    let acquired_at = Instant::now();
    tokio::time::sleep(ttl / 2).await;
    lease.renew().await?;
    // Past the first ttl the lease lives only because of the renewal.
    tokio::time::sleep_until((acquired_at + ttl + ttl / 10).into()).await;
    ensure!(lease.is_held(), "renewed lease ended at its first ttl");
    ensure!(
        b.try_acquire(&key, &s.long()).await?.is_none(),
        "contender got a renewed lock"
    );
    let reason = within(ttl * 2, "lost() after the last renewal", lease.lost()).await?;
    ensure!(
        reason == LossReason::Expired,
        "lost for {reason:?}, expected Expired"
    );
    ensure!(
        !lease.is_held() && lease.remaining().is_zero(),
        "lost lease still claims validity"
    );
    let next = within(
        ttl + s.handoff_bound(),
        "acquire after expiry",
        b.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    Ok(())
}

/// When `max_hold` elapses the lease is lost and the lock released.
pub async fn max_hold_ends_lease(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "max_hold_ends_lease");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let max_hold = Duration::from_millis(700);
    let lease = a.acquire(&key, &s.long().max_hold(max_hold)).await?;
    let started = Instant::now();
    let reason = within(
        max_hold + Duration::from_secs(2),
        "lost() at max_hold",
        lease.lost(),
    )
    .await?;
    ensure!(reason == LossReason::MaxHoldReached, "lost for {reason:?}");
    ensure!(
        started.elapsed() >= max_hold - Duration::from_millis(5),
        "lost before max_hold"
    );
    ensure!(!lease.is_held(), "lease still held after max_hold");
    // Released, not merely expired: the next holder gets it long before the ttl.
    let next = within(
        s.handoff_bound(),
        "acquire after max_hold",
        b.acquire(&key, &s.long()),
    )
    .await??;
    ensure!(
        matches!(lease.release().await, Err(LockError::Lost { .. })),
        "release after max_hold must give Lost"
    );
    next.release().await?;
    Ok(())
}

/// Tokens keep rising after a clean server restart.
pub async fn token_survives_server_restart(h: &dyn Harness) -> CaseResult {
    let dedicated = h.dedicated().await?;
    let s = Scope::new(&*dedicated, "token_survives_server_restart");
    let key = s.key("k")?;
    let client = s.client().await?;
    let mut highest = None;
    for _ in 0..3 {
        let lease = client.acquire(&key, &s.long()).await?;
        highest = highest.max(Some(lease.token()));
        lease.release().await?;
    }
    dedicated.restart_server().await?;
    let after = s.client().await?;
    let lease = after
        .acquire(&key, &s.long().wait(Wait::For(Duration::from_secs(30))))
        .await?;
    ensure!(
        Some(lease.token()) > highest,
        "token {} after restart not above {highest:?}",
        lease.token()
    );
    lease.release().await?;
    Ok(())
}
