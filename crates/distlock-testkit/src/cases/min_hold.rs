//! The minimum hold: a lock released early, or whose holder's process was
//! killed, stays held until `acquired + min_hold`, then frees by itself; a
//! backend that cannot keep a lock past its holder refuses the option.

use super::{CaseError, CaseResult, Scope, ensure};
use crate::harness::Harness;
use crate::holder::{self, HolderProcess};
use distlock_core::{Held, LockError, Wait};
use std::process::Command;
use std::time::{Duration, Instant};

/// How far before the earliest end of the hold the "still held" checks stop:
/// a grant seen from this process may come slightly later than assumed.
const MARGIN: Duration = Duration::from_millis(200);

/// Released at once with a `min_hold` of 4 ttl and a 30 s ttl: nobody gets the
/// lock (nor, where offered, the semaphore's one permit) until the min hold
/// ends, and the next holder gets it then, long before the ttl, with a
/// higher token.
pub async fn min_hold_outlasts_an_early_release(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "min_hold_outlasts_an_early_release");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let min_hold = s.short_ttl() * 4;
    let opts = s.long().min_hold(min_hold);
    let asked = Instant::now();
    let lease = a.acquire(&key, &opts).await?;
    let (token, granted) = (lease.token(), Instant::now());
    lease.release().await?;
    let window = (asked + min_hold).saturating_duration_since(Instant::now());
    s.stays_held(&b, &key, window.saturating_sub(MARGIN))
        .await?;
    let next = b.acquire(&key, &s.long()).await?;
    let bound = min_hold + s.handoff_bound();
    ensure!(
        granted.elapsed() <= bound,
        "the lock freed {:?} after its grant, bound min_hold {min_hold:?} + hand-off",
        granted.elapsed()
    );
    ensure!(
        next.token() > token,
        "token {} not above the early releaser's {token}",
        next.token()
    );
    next.release().await?;
    if h.capabilities().primitives.semaphore.is_offered() {
        let (one, other) = (s.semaphore().await?, s.semaphore().await?);
        let key = s.key("sem")?;
        let asked = Instant::now();
        one.acquire(&key, 1, &opts).await?.release().await?;
        let window = (asked + min_hold).saturating_duration_since(Instant::now());
        ensure!(
            window <= MARGIN || other.try_acquire(&key, 1, &s.long()).await?.is_none(),
            "a permit released within its min_hold was taken at once"
        );
        let permit = other.acquire(&key, 1, &s.long()).await?;
        permit.release().await?;
    }
    Ok(())
}

/// A holder process started with `min_hold` in its URL is killed with
/// SIGKILL a ttl after it holds the lock: its renewals kept the server's
/// expiry at the end of the min hold, so the lock stays held until then,
/// far beyond its ttl, and frees by itself.
pub async fn min_hold_outlasts_a_killed_holder(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "min_hold_outlasts_a_killed_holder");
    let (b, key) = (s.client().await?, s.key("k")?);
    let ttl = s.short_ttl();
    let min_hold = ttl * 8;
    let binary = holder::lock_holder()
        .ok_or("the suite's runner named no lock-holder binary (holder::use_lock_holder)")?;
    let url = h.lock_url().ok_or("this harness gives no lock URL")?;
    let joint = if url.contains('?') { '&' } else { '?' };
    let go = tempfile::tempdir()?;
    let mut command = Command::new(binary);
    command
        .arg(format!("{url}{joint}min_hold={}ms", min_hold.as_millis()))
        .arg(key.as_str())
        .arg(ttl.as_millis().to_string())
        // Never created: the holder keeps the lock until it is killed.
        .arg(go.path().join("go"));
    let spawned = Instant::now();
    let mut child = HolderProcess::spawn(command)?;
    let line = child
        .wait_line("HOLDING ", ttl * 4 + Duration::from_secs(20))
        .await?;
    let heard = Instant::now();
    // Its renewals (every ttl/3) run for a ttl first: one asking for the bare
    // ttl would bring the server's expiry before the min hold's end.
    tokio::time::sleep(ttl).await;
    child.kill();
    let killed = Instant::now();
    let token: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| CaseError::msg(format!("malformed holder line {line:?}")))?;
    // The grant came after the spawn: the server keeps the lock until then at least.
    let hold_end = spawned + min_hold;
    ensure!(
        hold_end > killed + ttl * 2,
        "the holder took {:?} to start and acquire, too long to tell its min_hold from its ttl",
        killed - spawned
    );
    let window = hold_end.saturating_duration_since(Instant::now());
    s.stays_held(&b, &key, window.saturating_sub(MARGIN))
        .await?;
    let next = b.acquire(&key, &s.long()).await?;
    let bound = min_hold + s.handoff_bound();
    ensure!(
        heard.elapsed() <= bound,
        "the lock freed {:?} after the holder held it, bound min_hold {min_hold:?} + hand-off",
        heard.elapsed()
    );
    ensure!(
        next.token().get() > token,
        "token {} not above the killed holder's {token}",
        next.token()
    );
    next.release().await?;
    Ok(())
}

/// A backend that cannot keep a lock past its holder refuses `min_hold` with
/// its reason, takes nothing, and still serves the same key without it.
pub async fn min_hold_refused_with_the_reason(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "min_hold_refused_with_the_reason");
    let (a, key) = (s.client().await?, s.key("k")?);
    let why = h.capabilities().min_hold.why_not().unwrap_or_default();
    let opts = s.long().min_hold(s.short_ttl() * 4).wait(Wait::No);
    match a.acquire(&key, &opts).await {
        Err(LockError::InvalidOptions { reason }) => ensure!(
            reason.contains("min_hold") && !why.is_empty() && reason.contains(why),
            "the refusal {reason:?} does not name min_hold and the backend's reason {why:?}"
        ),
        other => {
            return Err(CaseError::msg(format!(
                "min_hold on a backend that cannot keep it gave {other:?}, not InvalidOptions"
            )));
        }
    }
    s.expect_residue(0, Duration::from_secs(2)).await?;
    let lease = a.acquire(&key, &s.long().wait(Wait::No)).await?;
    lease.release().await?;
    Ok(())
}
