//! Takes a lock on a running server, prints its fencing token, and releases it.
//!
//! `cargo run -p distlock-etcd --example etcd_lock -- [URL]` (default `etcd://127.0.0.1:2379/distlock/`).

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey};
use distlock_etcd::EtcdConfig;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "etcd://127.0.0.1:2379/distlock/".into());
    let lock = EtcdConfig::from_url(&url)?.connect().await?;
    let key = LockKey::new("examples/lock")?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let lease = lock.acquire(&key, &opts).await?;
    println!(
        "holding {} on {} with token {}",
        lease.key(),
        lock.name(),
        lease.token()
    );
    lease.release().await
}
