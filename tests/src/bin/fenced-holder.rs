//! A lock holder for the paused-holder fence cases, run as a child process so
//! a case can freeze it with SIGSTOP the way a GC pause would.
//!
//! `fenced-holder LOCK_URL KEY TTL_MS STORE_URL RESOURCE GO_FILE`: takes the
//! lock, prints `HOLDING <token>`, waits until GO_FILE exists, then writes
//! `late` to RESOURCE in the fenced store with its token, without checking
//! whether it still holds the lock (as a paused process that just woke would),
//! and prints `WROTE`, `STALE <highest>` or `ERROR <message>`.

use distlock::{AcquireOptions, FencedWrite, LockError, LockKey};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

#[tokio::main]
async fn main() -> ExitCode {
    match hold_then_write(std::env::args().skip(1).collect()).await {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            println!("ERROR {message}");
            ExitCode::FAILURE
        }
    }
}

async fn hold_then_write(args: Vec<String>) -> Result<String, String> {
    let [lock_url, key, ttl_ms, store_url, resource, go] = args.as_slice() else {
        return Err("usage: fenced-holder LOCK_URL KEY TTL_MS STORE_URL RESOURCE GO_FILE".into());
    };
    let ttl = Duration::from_millis(ttl_ms.parse().map_err(|e| format!("TTL_MS: {e}"))?);
    let text = |e: LockError| e.to_string();
    let lock = distlock::connect(lock_url).await.map_err(text)?;
    let fence = distlock::connect_fence(store_url).await.map_err(text)?;
    let key = LockKey::new(key).map_err(text)?;
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .map_err(text)?;
    println!("HOLDING {}", lease.token());
    while !Path::new(go).exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    match fence
        .write(resource, lease.token(), FencedWrite::set("late"))
        .await
    {
        Ok(_) => Ok("WROTE".into()),
        Err(LockError::StaleToken { highest, .. }) => Ok(format!("STALE {highest}")),
        Err(other) => Err(other.to_string()),
    }
}
