//! The fence cases. Each works on resources under a fresh random prefix, so all
//! run in parallel against one store.

use super::FenceHarness;
use crate::cases::{CaseError, CaseResult, ensure, within};
use distlock_core::{FencedWrite, FencingToken, LockError, LockKey, WriteOutcome};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const T: fn(u64) -> FencingToken = FencingToken::new;

/// A resource name unique to this run of `case`.
fn resource(case: &str, name: &str) -> String {
    format!("fence-{:08x}/{case}/{name}", rand::random::<u32>())
}

/// Fails unless `result` is a `StaleToken` refusal of `token` by `highest`.
fn expect_stale<T: std::fmt::Debug>(
    result: Result<T, LockError>,
    token: FencingToken,
    highest: FencingToken,
) -> CaseResult {
    match result {
        Err(LockError::StaleToken {
            token: t,
            highest: h,
            ..
        }) if (t, h) == (token, highest) => Ok(()),
        other => Err(CaseError::msg(format!(
            "expected StaleToken {{ token: {token}, highest: {highest} }}, got {other:?}"
        ))),
    }
}

/// A lower token is refused whatever the write, and nothing changes.
pub async fn stale_token_refused_and_nothing_changed(h: &dyn FenceHarness) -> CaseResult {
    let fence = h.fence().await?;
    let r = resource("stale", "r");
    fence.write(&r, T(10), FencedWrite::set("ten")).await?;
    expect_stale(
        fence.write(&r, T(9), FencedWrite::set("nine")).await,
        T(9),
        T(10),
    )?;
    expect_stale(
        fence.write(&r, T(1), FencedWrite::Delete).await,
        T(1),
        T(10),
    )?;
    expect_stale(
        fence.write(&r, T(9), FencedWrite::add(5)).await,
        T(9),
        T(10),
    )?;
    let value = fence.read(&r).await?;
    ensure!(
        value.as_deref() == Some("ten"),
        "value after refusals: {value:?}"
    );
    let highest = fence.highest(&r).await?;
    ensure!(
        highest == Some(T(10)),
        "highest after refusals: {highest:?}"
    );
    Ok(())
}

/// Equal tokens are admitted (one holder writes many times), higher ones too.
pub async fn equal_and_higher_tokens_admitted(h: &dyn FenceHarness) -> CaseResult {
    let fence = h.fence().await?;
    let r = resource("admit", "r");
    fence.write(&r, T(5), FencedWrite::set("a")).await?;
    fence.write(&r, T(5), FencedWrite::set("b")).await?;
    ensure!(
        fence.read(&r).await?.as_deref() == Some("b"),
        "equal token not applied"
    );
    fence.write(&r, T(6), FencedWrite::set("c")).await?;
    let (value, highest) = (fence.read(&r).await?, fence.highest(&r).await?);
    ensure!(
        value.as_deref() == Some("c") && highest == Some(T(6)),
        "after a higher token: value {value:?}, highest {highest:?}"
    );
    fence.write(&r, T(6), FencedWrite::Delete).await?;
    ensure!(fence.read(&r).await?.is_none(), "delete not applied");
    ensure!(
        fence.highest(&r).await? == Some(T(6)),
        "delete dropped the token record"
    );
    expect_stale(
        fence.write(&r, T(5), FencedWrite::set("x")).await,
        T(5),
        T(6),
    )
}

/// A token recorded on one resource says nothing about another.
pub async fn resources_are_independent(h: &dyn FenceHarness) -> CaseResult {
    let fence = h.fence().await?;
    let (a, b) = (resource("independent", "a"), resource("independent", "b"));
    fence.write(&a, T(100), FencedWrite::set("a")).await?;
    fence.write(&b, T(1), FencedWrite::set("b")).await?;
    ensure!(
        fence.highest(&b).await? == Some(T(1)),
        "b's record disturbed"
    );
    ensure!(
        fence.highest(&a).await? == Some(T(100)),
        "a's record disturbed"
    );
    Ok(())
}

/// The flash sale: "take one if at least one is left" answers sold out, which
/// is not a stale token, and takes nothing.
pub async fn below_floor_is_not_stale(h: &dyn FenceHarness) -> CaseResult {
    let fence = h.fence().await?;
    let stock = resource("floor", "stock");
    let take_one = || FencedWrite::add_with_floor(-1, 0);
    fence.write(&stock, T(1), FencedWrite::set("1")).await?;
    let first = fence.write(&stock, T(2), take_one()).await?;
    ensure!(first == WriteOutcome::Counter(0), "first take: {first:?}");
    let second = fence.write(&stock, T(2), take_one()).await?;
    ensure!(
        second == WriteOutcome::BelowFloor { current: 0 },
        "second take: {second:?}"
    );
    expect_stale(fence.write(&stock, T(1), take_one()).await, T(1), T(2))?;
    let value = fence.read(&stock).await?;
    ensure!(value.as_deref() == Some("0"), "stock went to {value:?}");
    Ok(())
}

/// One fenced write as the concurrent case records it.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    token: FencingToken,
    invoked: Instant,
    completed: Instant,
    admitted: bool,
}

/// Writers with interleaved tokens race on one counter and one register. Only
/// admitted writes take effect, the register ends with a write of the highest
/// admitted token, and no write is admitted after a higher token's write
/// completed.
pub async fn concurrent_writers_leave_only_admitted_effects(h: &dyn FenceHarness) -> CaseResult {
    const WRITERS: usize = 12;
    const ROUNDS: usize = 15;
    let (counter, register) = (
        Arc::new(resource("concurrent", "counter")),
        Arc::new(resource("concurrent", "register")),
    );
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let fence = h.fence().await?;
        let (counter, register, attempts) = (counter.clone(), register.clone(), attempts.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Tokens interleave: a writer's next token may be below others'.
                let token = T(rand::random_range(1..=(WRITERS * ROUNDS) as u64));
                let invoked = Instant::now();
                let added = fence.write(&counter, token, FencedWrite::add(1)).await;
                let value = format!("{}:{writer}:{round}", token.get());
                let set = fence.write(&register, token, FencedWrite::set(value)).await;
                let completed = Instant::now();
                let mut log = attempts.lock().unwrap_or_else(PoisonError::into_inner);
                for (target, result) in [(0, added.map(|_| ())), (1, set.map(|_| ()))] {
                    let admitted = match result {
                        Ok(()) => true,
                        Err(LockError::StaleToken {
                            token: t, highest, ..
                        }) if t == token && highest > token => false,
                        Err(other) => return Err(CaseError::msg(format!("write failed: {other}"))),
                    };
                    log.push((
                        writer,
                        target,
                        Attempt {
                            token,
                            invoked,
                            completed,
                            admitted,
                        },
                    ));
                }
            }
            Ok::<_, CaseError>(())
        }));
    }
    for task in tasks {
        within(Duration::from_secs(120), "concurrent writers", task).await???;
    }
    let log = attempts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let admitted_adds = log
        .iter()
        .filter(|(_, target, a)| *target == 0 && a.admitted)
        .count();
    let value = fence_value(h, &counter).await?;
    ensure!(
        value == admitted_adds.to_string(),
        "counter is {value}, but {admitted_adds} adds were admitted"
    );
    let max_admitted = log
        .iter()
        .filter(|(_, target, a)| *target == 1 && a.admitted)
        .map(|(_, _, a)| a.token)
        .max();
    let fence = h.fence().await?;
    let highest = fence.highest(&register).await?;
    ensure!(
        highest == max_admitted,
        "highest {highest:?}, max admitted {max_admitted:?}"
    );
    let register_value = fence.read(&register).await?.unwrap_or_default();
    let register_token = register_value.split(':').next().unwrap_or_default();
    ensure!(
        Some(register_token) == max_admitted.map(|t| t.get().to_string()).as_deref(),
        "register holds {register_value:?}, written with a token below the highest admitted {max_admitted:?}"
    );
    // Times cover the writer's pair of writes: completion is late and invocation
    // early, so this can miss a violation but never invents one.
    for (writer, target, late) in log.iter().filter(|(_, _, a)| a.admitted) {
        let overtaken = log.iter().find(|(_, other_target, earlier)| {
            other_target == target
                && earlier.admitted
                && earlier.token > late.token
                && earlier.completed < late.invoked
        });
        if let Some((other, _, earlier)) = overtaken {
            return Err(CaseError::msg(format!(
                "stale write admitted: writer {writer}'s token {} after writer {other}'s token {} had completed",
                late.token, earlier.token
            )));
        }
    }
    Ok(())
}

async fn fence_value(h: &dyn FenceHarness, resource: &str) -> Result<String, CaseError> {
    Ok(h.fence().await?.read(resource).await?.unwrap_or_default())
}

/// Bad input is refused with a clear error before it reaches the store, and
/// nothing is written.
pub async fn bad_input_rejected_before_the_store(h: &dyn FenceHarness) -> CaseResult {
    let fence = h.fence().await?;
    let long = "r".repeat(LockKey::MAX_LEN + 1);
    for bad in ["", long.as_str(), "nul\0inside"] {
        match fence.write(bad, T(1), FencedWrite::set("v")).await {
            Err(LockError::InvalidKey { reason }) if reason.contains("resource") => {}
            other => {
                return Err(CaseError::msg(format!(
                    "resource of {} bytes gave {other:?}",
                    bad.len()
                )));
            }
        }
    }
    let r = resource("bad-input", "r");
    let oversized = "x".repeat(FencedWrite::MAX_PAYLOAD + 1);
    for write in [
        FencedWrite::set(oversized.clone()),
        FencedWrite::hash_set("f", oversized),
        FencedWrite::set_expiring("v", Duration::ZERO),
    ] {
        match fence.write(&r, T(1), write).await {
            Err(LockError::InvalidWrite { .. }) => {}
            other => return Err(CaseError::msg(format!("bad write gave {other:?}"))),
        }
    }
    let highest = fence.highest(&r).await?;
    ensure!(
        highest.is_none(),
        "refused writes recorded token {highest:?}"
    );
    ensure!(
        fence.read(&r).await?.is_none(),
        "refused writes wrote a value"
    );
    Ok(())
}

/// A store nobody answers at gives `Unavailable`, at connect or at the first
/// write, promptly.
pub async fn unreachable_store_is_unavailable(h: &dyn FenceHarness) -> CaseResult {
    let limit = Duration::from_secs(30);
    let r = resource("unreachable", "r");
    let result = match within(limit, "connecting to an unreachable store", h.unreachable()).await? {
        Ok(fence) => {
            let write = fence.write(&r, T(1), FencedWrite::set("v"));
            within(limit, "a write to an unreachable store", write).await?
        }
        Err(e) => Err(e),
    };
    ensure!(
        matches!(result, Err(LockError::Unavailable { .. })),
        "write to an unreachable store gave {result:?}"
    );
    Ok(())
}
