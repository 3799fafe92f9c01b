//! Waiters: prompt hand-off, cancellation, dying waiters, order, timeouts.

use super::{CaseError, CaseResult, Scope, ensure, still_pending, within};
use crate::fault::Fault;
use crate::harness::Harness;
use distlock_core::{LockError, Wait};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A waiter gets the lock promptly after release: push backends without any
/// poll sleep, poll backends within their backoff cap.
pub async fn waiter_wakes_promptly(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "waiter_wakes_promptly");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let held = a.acquire(&key, &s.long()).await?;
    let (waiter_key, opts) = (key.clone(), s.long());
    let waiter = tokio::spawn(async move {
        let lease = b.acquire(&waiter_key, &opts).await;
        (Instant::now(), lease)
    });
    // The waiter is parked (its wait is 20 s, the holder's ttl 30 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!waiter.is_finished(), "waiter acquired a held lock");
    let released_at = Instant::now();
    held.release().await?;
    let (acquired_at, lease) = within(Duration::from_secs(10), "waiter", waiter).await??;
    let lease = lease?;
    let handoff = acquired_at - released_at;
    ensure!(
        handoff <= s.handoff_bound(),
        "hand-off took {handoff:?}, bound {:?}",
        s.handoff_bound()
    );
    lease.release().await?;
    Ok(())
}

/// Dropped and timed-out acquires leave no residue, and the next acquirer is not
/// delayed by them.
pub async fn cancelled_wait_leaves_no_orphan(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "cancelled_wait_leaves_no_orphan");
    let key = s.key("k")?;
    let (a, b, c, d) = (
        s.client().await?,
        s.client().await?,
        s.client().await?,
        s.client().await?,
    );
    let held = a.acquire(&key, &s.long()).await?;
    // Cancelled by a timeout around the future.
    let timed_out =
        tokio::time::timeout(Duration::from_millis(300), b.acquire(&key, &s.long())).await;
    ensure!(timed_out.is_err(), "waiter acquired a held lock");
    // Cancelled by aborting the task it runs in.
    let (task_key, opts) = (key.clone(), s.long());
    let task = tokio::spawn(async move { c.acquire(&task_key, &opts).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    ensure!(
        task.await.is_err_and(|e| e.is_cancelled()),
        "aborted waiter finished instead"
    );
    s.expect_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    let next = within(
        s.handoff_bound(),
        "acquire after cancelled waiters",
        d.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// A queued waiter whose connection or session dies gets an error, never the
/// lock, and never hangs.
pub async fn waiter_session_expiry_is_an_error(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "waiter_session_expiry_is_an_error");
    let (a, c, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let faulty = h.faulty_client().await?;
    let held = a.acquire(&key, &s.long().ttl(s.short_ttl() * 2)).await?;
    let (waiter_key, opts) = (key.clone(), s.short().wait(Wait::Forever));
    let lock = faulty.lock.clone();
    let waiter = tokio::spawn(async move { lock.acquire(&waiter_key, &opts).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!waiter.is_finished(), "waiter acquired a held lock");
    faulty.faults.set_fault(Fault::Blackhole).await;
    held.release().await?;
    let outcome = within(Duration::from_secs(30), "partitioned waiter", waiter).await??;
    faulty.faults.set_fault(Fault::None).await;
    match outcome {
        Err(e) => ensure!(
            !matches!(e, LockError::InvalidOptions { .. }),
            "unexpected error {e}"
        ),
        Ok(lease) => {
            return Err(CaseError::msg(format!(
                "a waiter cut off from the backend got the lock (token {})",
                lease.token()
            )));
        }
    }
    let next = within(
        s.short_ttl() * 4 + s.handoff_bound(),
        "acquire after the dead waiter",
        c.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    Ok(())
}

/// A waiter ahead in line that dies does not hand the lock to the next waiter
/// while the holder still holds it.
pub async fn expired_waiter_ahead_does_not_skip_holder(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "expired_waiter_ahead_does_not_skip_holder");
    let (a, c, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let held = a.acquire(&key, &s.long()).await?;
    let ahead = if h.hooks().faulty_client {
        Some(h.faulty_client().await?)
    } else {
        None
    };
    let ahead_lock = match &ahead {
        Some(f) => f.lock.clone(),
        None => s.client().await?,
    };
    let (k1, opts) = (key.clone(), s.short().wait(Wait::Forever));
    let first = tokio::spawn(async move { ahead_lock.acquire(&k1, &opts).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (k2, opts) = (key.clone(), s.long().wait(Wait::Forever));
    let second = tokio::spawn(async move { c.acquire(&k2, &opts).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiter ahead dies: its session is cut off, or its task is killed.
    match &ahead {
        Some(f) => f.faults.set_fault(Fault::Blackhole).await,
        None => first.abort(),
    }
    let window = s.short_ttl() * 3;
    ensure!(
        still_pending(window, async {
            while !second.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await,
        "the waiter behind a dead waiter got the lock while it was held"
    );
    ensure!(held.is_held(), "holder lost its lease");
    held.release().await?;
    let lease = within(
        s.handoff_bound() + s.short_ttl() * 2,
        "second waiter after release",
        second,
    )
    .await???;
    if let Some(f) = &ahead {
        f.faults.set_fault(Fault::None).await;
    }
    first.abort();
    lease.release().await?;
    Ok(())
}

/// Waiters acquire in arrival order.
pub async fn fifo_order(h: &dyn Harness) -> CaseResult {
    const WAITERS: usize = 5;
    let s = Scope::new(h, "fifo_order");
    let (a, key) = (s.client().await?, s.key("k")?);
    let held = a.acquire(&key, &s.long()).await?;
    s.expect_residue(1, Duration::from_secs(5)).await?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (client, key, opts, order) = (s.client().await?, key.clone(), s.long(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = client.acquire(&key, &opts).await?;
            order
                .lock()
                .map_err(|_| CaseError::msg("poisoned"))?
                .push(i);
            lease.release().await?;
            Ok::<_, CaseError>(())
        }));
        // Arrival is when the waiter's queue entry exists.
        s.expect_residue(2 + i, Duration::from_secs(5)).await?;
    }
    held.release().await?;
    for task in tasks {
        within(Duration::from_secs(20), "waiter", task).await???;
    }
    let order = order
        .lock()
        .map_err(|_| CaseError::msg("poisoned"))?
        .clone();
    ensure!(
        order == (0..WAITERS).collect::<Vec<_>>(),
        "acquired in order {order:?}"
    );
    Ok(())
}

/// A bounded wait ends with `Timeout` close to the bound, leaving nothing behind.
pub async fn wait_timeout_honoured(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "wait_timeout_honoured");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let held = a.acquire(&key, &s.long()).await?;
    let wait = Duration::from_millis(700);
    let started = Instant::now();
    let outcome = b.acquire(&key, &s.long().wait(Wait::For(wait))).await;
    let took = started.elapsed();
    match outcome {
        Err(LockError::Timeout { .. }) => {}
        other => {
            return Err(CaseError::msg(format!(
                "bounded wait on a held lock gave {other:?}"
            )));
        }
    }
    ensure!(
        took + Duration::from_millis(5) >= wait,
        "gave up early, after {took:?}"
    );
    ensure!(
        took <= wait + Duration::from_millis(750),
        "gave up late, after {took:?} for {wait:?}"
    );
    s.expect_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}
