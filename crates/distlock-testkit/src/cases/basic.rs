//! The API contract: acquire, release, try, names, bad input, drop, reentrancy.

use super::{CaseResult, Scope, ensure, within};
use crate::harness::Harness;
use distlock_core::{AcquireOptions, HolderMeta, LockError, LockKey, Owner, Renewal, Wait};
use std::time::{Duration, Instant};

/// A free lock is acquired with a token, released, and acquired again with a
/// greater token.
pub async fn acquire_release_basic(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "acquire_release_basic");
    let (client, key) = (s.client().await?, s.key("k")?);
    let opts = s.long();
    let first = client.acquire(&key, &opts).await?;
    ensure!(first.is_held(), "a fresh lease must be held");
    ensure!(
        first.key() == &key,
        "lease key {:?} != {:?}",
        first.key(),
        key
    );
    let remaining = first.remaining();
    ensure!(
        remaining > Duration::ZERO && remaining <= opts.get_ttl(),
        "remaining {remaining:?} must be within (0, ttl]"
    );
    let token = first.token();
    first.release().await?;
    let second = client.try_acquire(&key, &opts).await?;
    let second = second.ok_or_else(|| super::CaseError::msg("released lock not re-acquirable"))?;
    ensure!(
        second.token() > token,
        "token {} after release must exceed {token}",
        second.token()
    );
    second.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// `try_acquire` on a held lock returns `None` at once, `Wait::No` gives `Busy`,
/// and neither leaves anything behind.
pub async fn try_acquire_when_held_returns_none(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "try_acquire_when_held_returns_none");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let held = a.acquire(&key, &s.long()).await?;
    let started = Instant::now();
    ensure!(
        b.try_acquire(&key, &s.long()).await?.is_none(),
        "held lock was acquired twice"
    );
    match b.acquire(&key, &s.long().wait(Wait::No)).await {
        Err(LockError::Busy { key: k, .. }) => ensure!(k == key, "Busy names {k:?}, not {key:?}"),
        other => {
            return Err(super::CaseError::msg(format!(
                "Wait::No on a held lock gave {other:?}"
            )));
        }
    }
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "failing fast took {:?}",
        started.elapsed()
    );
    s.expect_residue(1, Duration::from_secs(5)).await?;
    held.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await?;
    let again = b.try_acquire(&key, &s.long()).await?;
    ensure!(again.is_some(), "lock not free after release");
    Ok(())
}

/// Who holds a lock is stored with it: the server's record, read through
/// `Inspect::holder`, names this process's host and pid and the acquire's
/// label, and so does the `Busy` error of a refused `Wait::No`; a label with
/// a control character is refused before anything is sent.
pub async fn holder_metadata_is_shown(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "holder_metadata_is_shown");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let bad = a.acquire(&key, &s.long().label("two\nlines")).await;
    ensure!(
        matches!(&bad, Err(LockError::InvalidOptions { reason }) if reason.contains("control")),
        "a label with a newline gave {bad:?}"
    );
    let held = a.acquire(&key, &s.long().label("conformance run")).await?;
    let me = HolderMeta::this_process().labelled(Some("conformance run"));
    let inspect = (b.inspect()).ok_or_else(|| super::CaseError::msg("no inspector"))?;
    let holder = inspect.holder(&key).await?;
    let meta = holder.as_ref().and_then(|holder| holder.meta.clone());
    ensure!(
        meta.as_ref() == Some(&me),
        "Inspect::holder gave {holder:?}, not {me}"
    );
    match b.acquire(&key, &s.long().wait(Wait::No)).await {
        Err(busy @ LockError::Busy { .. }) => {
            let text = busy.to_string();
            ensure!(
                text.contains(&format!("held by {me};")),
                "Busy says {text:?}, not {me}"
            );
        }
        other => {
            return Err(super::CaseError::msg(format!(
                "Wait::No on a held lock gave {other:?}"
            )));
        }
    }
    held.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// Lock names that look alike or contain characters backends treat specially
/// (separators, hash tags, escapes, dot segments). Each must be an independent
/// lock; adapters reuse the list in their escaping unit tests.
pub const NAMES_THAT_MUST_NOT_COLLIDE: [&str; 13] = [
    "a",
    "A",
    "a/b",
    "ab",
    "a/",
    "{x}",
    "%2F",
    "a%2Fb",
    "x y",
    "ключ/🔒",
    "a\\b",
    ".",
    "..",
];

/// Names that differ in case, by a suffix, or by characters backends treat
/// specially are independent locks.
pub async fn names_are_independent(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "names_are_independent");
    let (a, b) = (s.client().await?, s.client().await?);
    let names = NAMES_THAT_MUST_NOT_COLLIDE;
    let mut leases = Vec::new();
    for name in names {
        let key = s.key(name)?;
        let lease = a.try_acquire(&key, &s.long()).await?;
        ensure!(lease.is_some(), "`{name}` was blocked by another name");
        leases.push(lease);
    }
    for name in names {
        let key = s.key(name)?;
        ensure!(
            b.try_acquire(&key, &s.long()).await?.is_none(),
            "`{name}` was not exclusive"
        );
    }
    for lease in leases.into_iter().flatten() {
        lease.release().await?;
    }
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// Bad keys and options give `InvalidKey` / `InvalidOptions` with a reason, and
/// leave nothing behind.
pub async fn invalid_input_rejected(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "invalid_input_rejected");
    let client = s.client().await?;
    for bad in [
        String::new(),
        "a\0b".into(),
        "a\nb".into(),
        "x".repeat(LockKey::MAX_LEN + 1),
    ] {
        match LockKey::new(&bad) {
            Err(LockError::InvalidKey { reason }) => ensure!(!reason.is_empty(), "empty reason"),
            other => return Err(super::CaseError::msg(format!("key {bad:?} gave {other:?}"))),
        }
    }
    let key = s.key("k")?;
    let caps = h.capabilities();
    let ttl = s.short_ttl();
    let mut bad_options = vec![
        ("zero ttl", s.long().ttl(Duration::ZERO)),
        (
            "renew interval = ttl",
            s.long().ttl(ttl).renewal(Renewal::Every(ttl)),
        ),
        ("zero max_hold", s.long().max_hold(Duration::ZERO)),
        ("zero min_hold", s.long().min_hold(Duration::ZERO)),
    ];
    if caps.min_ttl > Duration::from_nanos(1) {
        bad_options.push(("ttl below minimum", s.long().ttl(caps.min_ttl / 2)));
    }
    if caps.ttl_granularity > Duration::from_nanos(1) {
        bad_options.push((
            "ttl off granularity",
            s.long().ttl(ttl + caps.ttl_granularity / 2),
        ));
    }
    for (what, opts) in bad_options {
        match client.acquire(&key, &opts).await {
            Err(LockError::InvalidOptions { reason }) => {
                ensure!(!reason.is_empty(), "{what}: empty reason")
            }
            other => return Err(super::CaseError::msg(format!("{what} gave {other:?}"))),
        }
    }
    ensure!(Owner::new("").is_err(), "empty owner accepted");
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// Releasing can happen once per acquisition (`release` consumes the lease) and a
/// release that comes after another holder took over never frees that holder.
pub async fn double_release_is_safe(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "double_release_is_safe");
    let (a, b, c, key) = (
        s.client().await?,
        s.client().await?,
        s.client().await?,
        s.key("k")?,
    );
    let owner = Owner::new("double-release")?;
    let opts = s.long().owner(owner);
    // Two handles on one acquisition: the second release is the one that frees.
    let first = a.acquire(&key, &opts).await?;
    let second = a.acquire(&key, &opts.clone().wait(Wait::No)).await?;
    first.release().await?;
    ensure!(
        c.try_acquire(&key, &s.long()).await?.is_none(),
        "first of two releases freed the lock"
    );
    second.release().await?;
    let newer = within(
        s.handoff_bound(),
        "acquire after last release",
        b.acquire(&key, &s.long()),
    )
    .await??;
    // A late duplicate (drop of a stale handle, background release) must not free it.
    s.stays_held(&c, &key, Duration::from_millis(500)).await?;
    ensure!(newer.is_held(), "newer holder lost its lease");
    newer.release().await?;
    Ok(())
}

/// Dropping a lease, also while a task panics, frees the lock promptly.
pub async fn drop_releases(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "drop_releases");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let lease = a.acquire(&key, &s.long()).await?;
    drop(lease);
    let next = within(
        s.handoff_bound(),
        "acquire after drop",
        b.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;

    let holder = a.clone();
    let panicking_key = key.clone();
    let opts = s.long();
    let task = tokio::spawn(async move {
        let _lease = holder.acquire(&panicking_key, &opts).await;
        #[allow(clippy::panic, reason = "the case is about a holder that panics")]
        {
            panic!("deliberate panic in drop_releases: the holder dies while holding the lease");
        }
    });
    ensure!(
        task.await.is_err_and(|e| e.is_panic()),
        "holder task did not panic"
    );
    let next = within(
        s.handoff_bound(),
        "acquire after panic",
        b.acquire(&key, &s.long()),
    )
    .await??;
    next.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}

/// The same owner re-enters at once with the same token; the lock is freed after
/// the last release. Without an owner a second acquire waits like a contender.
pub async fn reentrant_same_owner(h: &dyn Harness) -> CaseResult {
    let s = Scope::new(h, "reentrant_same_owner");
    let (a, b, key) = (s.client().await?, s.client().await?, s.key("k")?);
    let opts = s.long().owner(Owner::new("worker-7")?);
    let outer = a.acquire(&key, &opts).await?;
    let inner = a.acquire(&key, &opts.clone().wait(Wait::No)).await?;
    ensure!(inner.token() == outer.token(), "reentry changed the token");
    ensure!(
        inner.owner() == opts.get_owner(),
        "reentrant lease lost its owner"
    );
    // The same owner on another client is another process: it must wait.
    ensure!(
        b.try_acquire(&key, &opts).await?.is_none(),
        "same owner on another client re-entered"
    );
    inner.release().await?;
    ensure!(outer.is_held(), "outer lease ended with the inner release");
    ensure!(
        b.try_acquire(&key, &s.long()).await?.is_none(),
        "freed before the last release"
    );
    outer.release().await?;
    let plain = within(
        s.handoff_bound(),
        "acquire after last release",
        b.acquire(&key, &s.long()),
    )
    .await??;
    let short_wait = AcquireOptions::new()
        .ttl(s.short_ttl())
        .wait(Wait::For(Duration::from_millis(300)));
    match b.acquire(&key, &short_wait).await {
        Err(LockError::Timeout { .. }) => {}
        other => {
            return Err(super::CaseError::msg(format!(
                "acquire without owner on a held key gave {other:?}"
            )));
        }
    }
    plain.release().await?;
    s.expect_residue(0, Duration::from_secs(5)).await
}
