//! Takes a lock on a running server, prints its fencing token, and releases it.
//!
//! `cargo run -p distlock-zookeeper --example zookeeper_lock -- [URL]` (default `zk://127.0.0.1:2181`).

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey};
use distlock_zookeeper::ZkConfig;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "zk://127.0.0.1:2181".into());
    let lock = ZkConfig::from_url(&url)?.connect().await?;
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
