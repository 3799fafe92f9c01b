//! Two clients of one in-process store take turns on a lock, and a fenced
//! store refuses the first one's write once the second has written.
//!
//! `cargo run -p distlock-core --example memory`

use distlock_core::memory::MemoryStore;
use distlock_core::{
    AcquireOptions, DistributedLock, Fence, FencedWrite, LockError, LockKey, MemoryFence,
};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let store = MemoryStore::new();
    let (a, b) = (store.client(), store.client());
    let stock = MemoryFence::new();
    let key = LockKey::new("inventory/sku-42")?;

    let first = a.acquire(&key, &AcquireOptions::new()).await?;
    let old_token = first.token();
    stock
        .write("sku-42", old_token, FencedWrite::set("10"))
        .await?;
    first.release().await?;

    let second = b.acquire(&key, &AcquireOptions::new()).await?;
    stock
        .write("sku-42", second.token(), FencedWrite::add(-1))
        .await?;
    second.release().await?;

    // The first holder comes back with its old token: refused.
    let late = stock.write("sku-42", old_token, FencedWrite::add(-1)).await;
    println!("late write with token {old_token}: {late:?}");
    println!("stock: {:?}", stock.read("sku-42").await?);
    Ok(())
}
