//! The flash sale through the facade: a lock from a URL, the stock in a fenced
//! store from a URL, and "take one if at least one is left" per buyer.
//!
//! `cargo run -p distlock --example flash_sale -- [LOCK_URL] [STORE_URL]`
//! (defaults `memory://shop` for both; needs the backends' features for
//! others, for example `--features redis,etcd`).

use distlock::{AcquireOptions, FencedWrite, FencingToken, LockError, LockKey, WriteOutcome};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let mut args = std::env::args().skip(1);
    let lock_url = args.next().unwrap_or_else(|| "memory://shop".into());
    let store_url = args.next().unwrap_or_else(|| "memory://shop".into());
    let lock = distlock::connect(&lock_url).await?;
    let stock = distlock::connect_fence(&store_url).await?;
    let key = LockKey::new("flash-sale/sku-42")?;
    stock
        .write("stock:sku-42", FencingToken::new(0), FencedWrite::set("3"))
        .await?;
    for buyer in 1..=5 {
        let lease = lock.acquire(&key, &AcquireOptions::new()).await?;
        let take_one = FencedWrite::add_with_floor(-1, 0);
        let outcome = lease
            .guard(stock.write("stock:sku-42", lease.token(), take_one))
            .await??;
        lease.release().await?;
        match outcome {
            WriteOutcome::Counter(left) => println!("buyer {buyer}: sold, {left} left"),
            WriteOutcome::BelowFloor { .. } => println!("buyer {buyer}: sold out"),
            other => println!("buyer {buyer}: {other:?}"),
        }
    }
    Ok(())
}
