//! A lock holder for the chaos run's paused-holder fault, run as a child
//! process so the run can freeze it with SIGSTOP the way a GC pause would.
//!
//! `chaos-holder LOCK_URL KEY TTL_MS GO_FILE`: waits up to 4 ttl for the lock
//! and prints `HOLDING <token> <remaining_ms>` (or `NOT-ACQUIRED <why>` and
//! exits); prints `LOST <reason>` whenever its `lost()` fires; once GO_FILE
//! exists prints `WRITE <is_held>` (the run makes that write with its token,
//! unchecked, as a process that just woke would); then releases and prints
//! `RELEASED ok`, `RELEASED lost:<reason>` or `RELEASED error:<text>`.
//! The protocol is `distlock_testkit::chaos::holder`'s.

use distlock::{AcquireOptions, LockError, LockKey, Wait};
use std::path::Path;
use std::time::Duration;

#[tokio::main]
async fn main() {
    if let Err(why) = hold(std::env::args().skip(1).collect()).await {
        println!("NOT-ACQUIRED {}", one_line(&why));
    }
}

async fn hold(args: Vec<String>) -> Result<(), String> {
    let [lock_url, key, ttl_ms, go] = args.as_slice() else {
        return Err("usage: chaos-holder LOCK_URL KEY TTL_MS GO_FILE".into());
    };
    let ttl = Duration::from_millis(ttl_ms.parse().map_err(|e| format!("TTL_MS: {e}"))?);
    let text = |e: LockError| e.to_string();
    let lock = distlock::connect(lock_url).await.map_err(text)?;
    let key = LockKey::new(key).map_err(text)?;
    let opts = AcquireOptions::new().ttl(ttl).wait(Wait::For(ttl * 4));
    let lease = lock.acquire(&key, &opts).await.map_err(text)?;
    println!(
        "HOLDING {} {}",
        lease.token(),
        lease.remaining().as_millis()
    );
    let lost = lease.lost();
    tokio::spawn(async move {
        let reason = lost.await;
        println!("LOST {reason:?}");
    });
    // Polling a file is this child's only way to hear from the run; the
    // pause itself comes from outside, as SIGSTOP.
    while !Path::new(go).exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("WRITE {}", lease.is_held());
    match lease.release().await {
        Ok(()) => println!("RELEASED ok"),
        Err(LockError::Lost { reason, .. }) => println!("RELEASED lost:{reason:?}"),
        Err(e) => println!("RELEASED error:{}", one_line(&e.to_string())),
    }
    Ok(())
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
