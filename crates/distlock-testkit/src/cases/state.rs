//! Bounded per-name state, where [`Capabilities::state_collection`] offers
//! it: names used once and given back leave nothing on the server once they
//! have been idle for `state_ttl`, and a name used again after that gets
//! tokens above every earlier one.
//!
//! Collection runs either on the server (expiry) or inside the acquires of
//! new names (the SQL backends' bounded sweep), so while the cases wait for
//! it they keep using new names outside the case's prefix, as a live service
//! would; a server that expires state on its own is unaffected by them.
//!
//! [`Capabilities::state_collection`]: distlock_core::Capabilities

use super::{CaseError, CaseResult, Scope, ensure};
use crate::harness::Harness;
use distlock_core::{
    AcquireOptions, Capabilities, DynLock, FencingToken, Held, LockKey, SingleLease,
};
use std::time::{Duration, Instant};

/// The `state_ttl` the cases' clients run with: the shortest one accepted.
const STATE_TTL: Duration = Duration::from_secs(2);

/// How many distinct names [`state_is_collected`] uses, of every primitive.
const NAMES: usize = 200;

/// Beyond the lease's ttl and `state_ttl`, how long expiry may lag on a busy
/// machine.
const SLACK: Duration = Duration::from_secs(15);

/// The cases' lease ttl, at least: what is tested is collection after the
/// lease, not how fast a grant comes. With the suite's 1 s ttl, a grant whose
/// reply took longer on a starved machine was rightly refused as dead
/// (`Timeout`) and failed the case.
const LEASE_TTL: Duration = Duration::from_secs(3);

/// Hundreds of distinct names, each taken and given back once as a lock and as
/// every other primitive the backend offers, leave no per-name record on the
/// server once `state_ttl` has passed since their leases.
pub async fn state_is_collected(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "state_is_collected");
    let client = h.client_with_state_ttl(STATE_TTL).await?;
    let opts = lease_options(&s);
    for i in 0..NAMES {
        use_once(
            &client,
            &h.capabilities(),
            &s.key(&format!("name-{i}"))?,
            &opts,
        )
        .await?;
    }
    // A held name has state on every backend (some keep none once it is given
    // back), so a count of zero here means the count misses records.
    let held = client.acquire(&s.key("held")?, &opts).await?;
    let counted = state_records(&s).await?;
    held.release().await?;
    ensure!(
        counted > 0,
        "{counted} state records while a name is held: the count misses them"
    );
    let due = opts.get_ttl() + STATE_TTL + SLACK;
    await_collected(&s, &client, due).await
}

/// A name whose state was collected gets, at its next grant, a token above
/// every token it had before, for the lock and every other primitive offered.
pub async fn token_rises_after_state_collected(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "token_rises_after_state_collected");
    let client = h.client_with_state_ttl(STATE_TTL).await?;
    let (caps, key, opts) = (h.capabilities(), s.key("reused")?, lease_options(&s));
    let mut before: Vec<Vec<FencingToken>> = Vec::new();
    for _ in 0..3 {
        before.push(use_once(&client, &caps, &key, &opts).await?);
    }
    await_collected(&s, &client, opts.get_ttl() + STATE_TTL + SLACK).await?;
    let after = use_once(&client, &caps, &key, &opts).await?;
    for (primitive, token) in after.iter().enumerate() {
        let earlier: Vec<FencingToken> = before.iter().map(|round| round[primitive]).collect();
        ensure!(
            earlier.iter().all(|t| token > t),
            "after collection, primitive #{primitive} of `{key}` gave token {token}, not above \
             its earlier {earlier:?}"
        );
    }
    Ok(())
}

/// Takes and gives back `key` once as a lock, then as a 2-permit semaphore, a
/// read share and the write share where offered; returns the tokens in that
/// order.
async fn use_once(
    client: &DynLock,
    caps: &Capabilities,
    key: &LockKey,
    opts: &AcquireOptions,
) -> Result<Vec<FencingToken>, CaseError> {
    let lease = client.acquire(key, opts).await?;
    let mut tokens = vec![lease.token()];
    lease.release().await?;
    if caps.primitives.semaphore.is_offered() {
        let semaphore = client.semaphore().ok_or("no semaphore on the client")?;
        let permit = semaphore.acquire(key, 2, opts).await?;
        tokens.push(permit.token());
        permit.release().await?;
    }
    if caps.primitives.rwlock.is_offered() {
        let rwlock = client.rwlock().ok_or("no read-write lock on the client")?;
        let read = rwlock.read(key, opts).await?;
        tokens.push(read.token());
        read.release().await?;
        let write = rwlock.write(key, opts).await?;
        tokens.push(write.token());
        write.release().await?;
    }
    Ok(tokens)
}

/// Options with the backend's shortest ttl, raised to [`LEASE_TTL`].
fn lease_options(s: &Scope<'_>) -> AcquireOptions {
    s.long().ttl(s.short_ttl().max(LEASE_TTL))
}

/// How many per-name records the servers hold under the case's prefix.
async fn state_records(s: &Scope<'_>) -> Result<usize, CaseError> {
    let inspector = s.h.inspector().await?;
    let inspect = inspector
        .inspect()
        .ok_or("the inspector offers no Inspect")?;
    inspect.state_records(s.prefix()).await?.ok_or_else(|| {
        CaseError::msg(
            "the backend claims state_collection but Inspect::state_records cannot count",
        )
    })
}

/// Polls until no per-name record is left under the prefix (what a backend
/// keeps per namespace does not count), failing after `within`. Before each
/// look, `client` uses one new name, outside the prefix, as every primitive.
async fn await_collected(s: &Scope<'_>, client: &DynLock, within: Duration) -> CaseResult {
    let deadline = Instant::now() + within;
    let (caps, opts) = (s.h.capabilities(), lease_options(s));
    let elsewhere = format!("{}-later/", s.prefix().trim_end_matches('/'));
    for round in 0_u64.. {
        let name = LockKey::new(format!("{elsewhere}{round}"))?;
        use_once(client, &caps, &name, &opts).await?;
        let left = state_records(s).await?;
        if left == 0 {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{left} state records still under {} after {within:?} idle (none expected)",
            s.prefix()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(CaseError::msg("more than u64::MAX rounds"))
}
