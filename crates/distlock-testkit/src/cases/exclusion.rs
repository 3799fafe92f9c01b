//! Safety: one holder at a time, and tokens that only go up.

use super::{CaseError, CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use crate::history::History;
use distlock_core::{Fence, FencedWrite, FencingToken, LockError, MemoryFence, Renewal, Wait};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// K clients × M rounds on one key: never two in the section, no lost update,
/// tokens increase from holder to holder.
pub async fn mutual_exclusion_under_contention(h: &dyn Harness) -> CaseResult {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 12;
    let s = Scope::new(h, "mutual_exclusion_under_contention");
    let key = s.key("counter")?;
    let inside = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for client_id in 0..CLIENTS {
        let client = s.client().await?;
        let (key, opts) = (
            key.clone(),
            s.long().wait(Wait::For(Duration::from_secs(60))),
        );
        let (inside, counter, history) = (inside.clone(), counter.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let lease = client.acquire(&key, &opts).await?;
                let entered = Instant::now();
                if inside.fetch_add(1, SeqCst) != 0 {
                    return Err(CaseError::msg("two holders inside the critical section"));
                }
                // Read, yield, write: a lost update shows if exclusion fails.
                let seen = counter.load(SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                counter.store(seen + 1, SeqCst);
                inside.fetch_sub(1, SeqCst);
                history.record_lease(client_id, &lease, entered);
                lease.release().await?;
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let total = counter.load(SeqCst);
    ensure!(
        total == (CLIENTS * ROUNDS) as u64,
        "lost updates: counter {total}, expected {}",
        CLIENTS * ROUNDS
    );
    let violations = history.check();
    ensure!(violations.is_empty(), "history violations: {violations:?}");
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// Tokens strictly increase across holders, clients, releases and ttl takeovers.
pub async fn fencing_tokens_strictly_increase(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "fencing_tokens_strictly_increase");
    let key = s.key("k")?;
    let clients = [s.client().await?, s.client().await?, s.client().await?];
    let mut last = None;
    for round in 0..9 {
        let lease = clients[round % 3].acquire(&key, &s.long()).await?;
        ensure!(
            last < Some(lease.token()),
            "token {} after {last:?}",
            lease.token()
        );
        last = Some(lease.token());
        lease.release().await?;
    }
    // A holder that stops renewing is taken over when its ttl runs out.
    let expiring = clients[0]
        .acquire(&key, &s.short().renewal(Renewal::Manual))
        .await?;
    ensure!(last < Some(expiring.token()), "token did not increase");
    let taker = clients[1].acquire(&key, &s.long()).await?;
    ensure!(
        taker.token() > expiring.token(),
        "takeover token {} not above the expired holder's {}",
        taker.token(),
        expiring.token()
    );
    taker.release().await?;
    Ok(())
}

/// A holder that pauses past its ttl is overtaken; its late write is refused by
/// the fence, and the new holder's write is accepted.
pub async fn fence_rejects_stale_holder(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "fence_rejects_stale_holder");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("stock")?);
    let fence = MemoryFence::new();
    let resource = key.as_str();
    // Manual renewal: the paused process cannot renew.
    let paused = a.acquire(&key, &s.short().renewal(Renewal::Manual)).await?;
    fence
        .write(resource, paused.token(), FencedWrite::set("paused"))
        .await?;
    let fresh = b.acquire(&key, &s.long()).await?;
    ensure!(
        !paused.is_held(),
        "the paused lease still believes it holds the lock"
    );
    late_write_refused(&fence, resource, paused.token(), fresh.token()).await?;
    fresh.release().await?;
    Ok(())
}

/// The fresh holder's write lands; the paused holder's late write is refused
/// with `StaleToken` naming both tokens, and the value stays the fresh one.
pub(super) async fn late_write_refused(
    fence: &MemoryFence,
    resource: &str,
    paused: FencingToken,
    fresh: FencingToken,
) -> CaseResult {
    fence
        .write(resource, fresh, FencedWrite::set("fresh"))
        .await?;
    match fence
        .write(resource, paused, FencedWrite::set("late"))
        .await
    {
        Err(LockError::StaleToken { token, highest, .. }) => {
            ensure!(
                token == paused && highest == fresh,
                "wrong tokens in StaleToken"
            );
        }
        other => {
            return Err(CaseError::msg(format!(
                "late write by the stale holder gave {other:?}"
            )));
        }
    }
    let value = fence.read(resource).await?;
    ensure!(
        value.as_deref() == Some("fresh"),
        "the stale write changed the value to {value:?}"
    );
    Ok(())
}

/// One stress run at a time in a process: several backends' 10,000-cycle runs
/// at once starve a small machine's CPU for seconds, and then a backend with a
/// short reply timeout (Redlock's 250 ms per node) rightly reports its nodes
/// unavailable: the machine is measured, not the backend.
static STRESS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// 10,000 cycles over 64 keys from 16 clients: no overlap, tokens increasing per
/// key, nothing left behind.
pub async fn many_keys_many_clients(h: &dyn Harness) -> CaseResult {
    const CLIENTS: usize = 16;
    const KEYS: usize = 64;
    const CYCLES: usize = 10_000;
    let _alone = STRESS.acquire().await?;
    let s = Scope::new(h, "many_keys_many_clients");
    let keys = Arc::new(
        (0..KEYS)
            .map(|i| s.key(&format!("k{i}")))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let history = Arc::new(History::new());
    let remaining = Arc::new(AtomicUsize::new(CYCLES));
    let mut tasks = Vec::new();
    for client_id in 0..CLIENTS {
        let client = s.client().await?;
        let (keys, history, remaining) = (keys.clone(), history.clone(), remaining.clone());
        let opts = s.long().wait(Wait::For(Duration::from_secs(60)));
        tasks.push(tokio::spawn(async move {
            while remaining
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                let key = &keys[rand::random_range(0..KEYS)];
                let lease = client.acquire(key, &opts).await?;
                let entered = Instant::now();
                tokio::task::yield_now().await;
                history.record_lease(client_id, &lease, entered);
                lease.release().await?;
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        within(Duration::from_secs(600), "10k cycles", task).await???;
    }
    ensure!(
        history.len() == CYCLES,
        "recorded {} cycles, expected {CYCLES}",
        history.len()
    );
    let violations = history.check();
    ensure!(violations.is_empty(), "history violations: {violations:?}");
    s.expect_residue(0, Duration::from_secs(10)).await
}
