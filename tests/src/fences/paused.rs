//! The cross product that matters: for each lock backend, a holder process is
//! frozen (SIGSTOP) past its ttl, a new holder takes the lock and writes, then
//! the frozen one wakes and writes with its old token. The store itself must
//! refuse that late write: `<store>::paused_holder_under_<lock>`.

use super::servers::{Endpoint, Servers};
use distlock::{AcquireOptions, FencedWrite, LockKey, Wait};
use distlock_core::BoxError;
use distlock_testkit::holder::HolderProcess;
use distlock_testkit::runner::runtime;
use libtest_mimic::{Failed, Trial};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The frozen holder's ttl: above every backend's minimum, short enough to wait out.
const HOLDER_TTL: Duration = Duration::from_secs(2);

/// Every lock the paused holder runs under, by name: each backend's
/// `fence_locks` in the backends' table.
pub fn locks() -> Vec<(&'static str, Endpoint)> {
    crate::backends()
        .into_iter()
        .filter_map(|backend| Some((backend, backend.launch?)))
        .flat_map(|(backend, launch)| {
            backend.fence_locks.iter().map(move |&(name, query)| {
                let at = Endpoint {
                    backend: backend.name,
                    launch,
                    query,
                };
                (name, at)
            })
        })
        .collect()
}

/// One trial per lock backend for `store`; `holder` is the path of the
/// `fenced-holder` binary (`env!("CARGO_BIN_EXE_fenced-holder")` in a test).
pub fn trials(
    store: &'static str,
    store_at: Endpoint,
    servers: &Arc<Servers>,
    holder: &'static str,
) -> Vec<Trial> {
    locks()
        .into_iter()
        .map(|(lock, lock_at)| {
            let servers = servers.clone();
            Trial::test(format!("{store}::paused_holder_under_{lock}"), move || {
                runtime()
                    .block_on(paused_holder_is_refused(
                        &servers, store_at, lock_at, holder,
                    ))
                    .map_err(|e| Failed::from(e.to_string()))
            })
        })
        .collect()
}

async fn paused_holder_is_refused(
    servers: &Servers,
    store_at: Endpoint,
    lock_at: Endpoint,
    holder: &str,
) -> Result<(), BoxError> {
    let (store_url, lock_url) = (servers.url(store_at).await?, servers.url(lock_at).await?);
    let tag = format!("{:08x}", rand::random::<u32>());
    let (key, resource) = (format!("paused-{tag}"), format!("fenced-{tag}"));
    let dir = tempfile::tempdir()?;
    let go = dir.path().join("go");
    let mut command = Command::new(holder);
    command.args([
        &lock_url,
        &key,
        &HOLDER_TTL.as_millis().to_string(),
        &store_url,
        &resource,
    ]);
    command.arg(&go);
    let mut holder = HolderProcess::spawn(command)?;
    let old_token = holder.wait_holding(Duration::from_secs(30)).await?;

    // The GC pause: the holder can neither renew nor notice anything.
    holder.pause()?;
    let lock = distlock::connect(&lock_url).await?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Wait::For(Duration::from_secs(30)));
    let lease = lock.acquire(&LockKey::new(&key)?, &opts).await?;
    if lease.token().get() <= old_token {
        return Err(format!("new token {} not above {old_token}", lease.token()).into());
    }
    let fence = distlock::connect_fence(&store_url).await?;
    fence
        .write(&resource, lease.token(), FencedWrite::set("fresh"))
        .await?;

    // The holder wakes believing it still holds the lock, and writes.
    std::fs::write(&go, b"")?;
    holder.resume()?;
    let line = holder.wait_line("", Duration::from_secs(30)).await?;
    let expected = format!("STALE {}", lease.token());
    if line != expected {
        return Err(format!(
            "the woken holder's late write gave {line:?}, expected {expected:?}\n{}",
            holder.output_tail()
        )
        .into());
    }
    let value = fence.read(&resource).await?;
    if value.as_deref() != Some("fresh") {
        return Err(format!("the fenced value is {value:?} after the late write").into());
    }
    lease.release().await?;
    Ok(())
}
