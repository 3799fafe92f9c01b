//! Takes a lock on a running server, prints its fencing token, and releases it.
//!
//! `cargo run -p distlock-mysql --example mysql_lock -- [URL]` (default `mysql://root:secret@127.0.0.1:3306/distlock`).

use distlock_core::{AcquireOptions, LockError, LockKey};
use distlock_mysql::MySqlConfig;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mysql://root:secret@127.0.0.1:3306/distlock".into());
    let lock = MySqlConfig::from_url(&url)?.connect().await?;
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
