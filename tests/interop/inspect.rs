//! What distlock's own `Inspect` sees on the server while the other client
//! holds or waits: the holder and how many contenders are queued.

use distlock_core::{DistributedLock, LockKey};
use distlock_testkit::cases::{CaseError, CaseResult};
use distlock_testkit::ensure;
use std::time::{Duration, Instant};

/// How long a queue may take to reach the expected length.
const SETTLE: Duration = Duration::from_secs(5);

/// The holder of `key` as distlock reads it: its name (a ZooKeeper node name,
/// an etcd lease id in hex) and its token (czxid, create revision).
pub async fn holder(lock: &dyn DistributedLock, key: &LockKey) -> Result<(String, u64), CaseError> {
    let holder = inspector(lock)?
        .holder(key)
        .await?
        .ok_or_else(|| CaseError::msg(format!("distlock sees no holder of {key}")))?;
    let token = holder
        .token
        .ok_or_else(|| CaseError::msg(format!("the holder of {key} has no token")))?;
    Ok((holder.owner, token.get()))
}

/// Waits until `key`'s queue holds `entries` contenders of either client.
pub async fn expect_queue(
    lock: &dyn DistributedLock,
    key: &LockKey,
    entries: usize,
    what: &str,
) -> CaseResult {
    let deadline = Instant::now() + SETTLE;
    loop {
        let found = inspector(lock)?.residue(key.as_str()).await?;
        if found.len() == entries {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{what}: {} queued instead of {entries} after {SETTLE:?}: {found:?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn inspector(
    lock: &dyn DistributedLock,
) -> Result<&dyn distlock_core::toolkit::Inspect, CaseError> {
    lock.inspect()
        .ok_or_else(|| CaseError::msg(format!("the {} adapter offers no Inspect", lock.name())))
}
