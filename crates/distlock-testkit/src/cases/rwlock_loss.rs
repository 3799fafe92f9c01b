//! Read-write lock cases about ending shares: crashed readers and writers free
//! at their ttl, cancelled waits leave nothing, `lost()` fires on deletion.

use super::loss::{lost_by_deletion, stale_gave_lost};
use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{Held, LockError, RwMode, SingleLease, Wait};
use std::time::{Duration, Instant};

/// A reader that stops renewing without releasing (a crash) blocks a writer
/// only until its ttl; a crashed writer blocks a reader only until its ttl.
pub async fn rwlock_crashed_shares_free_after_ttl(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "rwlock_crashed_shares_free_after_ttl");
    let (a, b, key) = (s.rwlock().await?, s.rwlock().await?, s.key("rw")?);
    let ttl = s.short_ttl();
    let opts = s.long().wait(Wait::For(ttl * 3));
    for (crash, next) in [(RwMode::Read, RwMode::Write), (RwMode::Write, RwMode::Read)] {
        let crashed = match crash {
            RwMode::Read => a.read(&key, &s.short()).await?,
            RwMode::Write => a.write(&key, &s.short()).await?,
        };
        let crashed_token = crashed.token();
        crashed.abandon();
        let crashed_at = Instant::now();
        let early = match next {
            RwMode::Read => b.try_read(&key, &s.long()).await?,
            RwMode::Write => b.try_write(&key, &s.long()).await?,
        };
        ensure!(
            early.is_none(),
            "a {next} lease got in before the crashed {crash} lease's ttl"
        );
        let lease = match next {
            RwMode::Read => b.read(&key, &opts).await?,
            RwMode::Write => b.write(&key, &opts).await?,
        };
        let freed_after = crashed_at.elapsed();
        ensure!(
            freed_after <= ttl + s.handoff_bound(),
            "the crashed {crash} lease freed {freed_after:?} after the crash, ttl {ttl:?}"
        );
        ensure!(
            lease.token() > crashed_token,
            "token {} not above the crashed lease's {crashed_token}",
            lease.token()
        );
        lease.release().await?;
    }
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}

/// Dropped, aborted and timed-out reads and writes leave no share or queue
/// entry, and the next acquirer is not delayed by them.
pub async fn rwlock_cancelled_wait_leaves_no_residue(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "rwlock_cancelled_wait_leaves_no_residue");
    let key = s.key("rw")?;
    let (a, b, c, d) = (
        s.rwlock().await?,
        s.rwlock().await?,
        s.rwlock().await?,
        s.rwlock().await?,
    );
    let held = a.write(&key, &s.long()).await?;
    let dropped = tokio::time::timeout(Duration::from_millis(300), b.read(&key, &s.long())).await;
    ensure!(dropped.is_err(), "a reader got in while a writer held");
    let dropped = tokio::time::timeout(Duration::from_millis(300), b.write(&key, &s.long())).await;
    ensure!(dropped.is_err(), "a second writer got in");
    let bounded = c
        .read(&key, &s.long().wait(Wait::For(Duration::from_millis(300))))
        .await;
    ensure!(
        matches!(bounded, Err(LockError::Timeout { .. })),
        "a bounded read gave {bounded:?}"
    );
    let (task_key, opts) = (key.clone(), s.long());
    let task = tokio::spawn(async move { c.write(&task_key, &opts).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    ensure!(
        task.await.is_err_and(|e| e.is_cancelled()),
        "aborted writer finished instead"
    );
    s.expect_rwlock_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    let next = within(
        s.handoff_bound(),
        "a write after cancelled waiters",
        d.write(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}

/// An operator deleting the shares of a read-write lock makes every holder's
/// `lost()` fire (readers and a writer alike); their releases give `Lost` and
/// never end a newer holder's share.
pub async fn rwlock_lost_on_external_deletion(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "rwlock_lost_on_external_deletion");
    let (a, b, key) = (s.rwlock().await?, s.rwlock().await?, s.key("rw")?);
    let inspect_client = s.rwlock().await?;
    let inspect = inspect_client
        .inspect()
        .ok_or_else(|| CaseError::msg("the read-write lock offers no inspection"))?;
    for mode in [RwMode::Read, RwMode::Write] {
        let lease = match mode {
            RwMode::Read => a.read(&key, &s.short()).await?,
            RwMode::Write => a.write(&key, &s.short()).await?,
        };
        let shares = inspect.shares(&key).await?;
        ensure!(
            shares.len() == 1
                && shares
                    .iter()
                    .all(|sh| sh.mode == mode && sh.token == lease.token()),
            "inspection shows {shares:?}, not the one {mode} share held"
        );
        let deleted = inspect.delete_shares(&key).await?;
        ensure!(
            deleted == 1,
            "the inspector deleted {deleted} shares, not 1"
        );
        lost_by_deletion(&s, lease.lost()).await?;
        ensure!(!lease.is_held(), "{mode} lease still held after deletion");
        let next = b.write(&key, &s.long()).await?;
        let outcome = lease.release().await;
        stale_gave_lost(
            &format!("release of a deleted {mode} lease"),
            &outcome,
            next.is_held(),
        )?;
        next.release().await?;
    }
    s.expect_rwlock_residue(0, Duration::from_secs(5)).await
}
