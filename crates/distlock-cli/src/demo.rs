//! `distlock demo`: why a lock, and why a lock is not enough.
//!
//! 1. A flash sale without a lock: buyers read the stock, take a moment to pay,
//!    and write stock-1. Reads interleave, so more items are sold than exist.
//! 2. The same sale with the lock held around read-pay-write: exactly the stock.
//! 3. A holder that pauses past its ttl (GC, SIGSTOP) still believes it holds the
//!    lock when it wakes. Its late write is refused by the fence, because a newer
//!    holder already wrote with a higher token.

use crate::args::{run_prefix, short_ttl, show};
use crate::exit::{self, Failure};
use distlock::{
    AcquireOptions, DynLock, FencingToken, LockError, LockKey, MemoryFence, Renewal, Wait,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Backend URL (default: memory://demo, in this process).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Items in stock.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    items: u32,
    /// Concurrent buyers.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    buyers: u32,
}

/// The shop's database: a stock counter read and written in two steps, as an
/// application does with `SELECT` then `UPDATE`.
#[derive(Default)]
struct Shop {
    stock: Mutex<u32>,
    sold: AtomicU32,
}

impl Shop {
    fn with_stock(items: u32) -> Arc<Self> {
        Arc::new(Shop {
            stock: Mutex::new(items),
            sold: AtomicU32::new(0),
        })
    }
    fn read(&self) -> u32 {
        *self.stock.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn write(&self, stock: u32) {
        *self.stock.lock().unwrap_or_else(PoisonError::into_inner) = stock;
    }
    /// One purchase: read, pay (a short await), write. Not atomic on purpose.
    async fn buy(&self) -> bool {
        let left = self.read();
        if left == 0 {
            return false;
        }
        // The payment call: other buyers run meanwhile.
        tokio::time::sleep(Duration::from_micros(rand::random_range(100..1500))).await;
        self.write(left - 1);
        self.sold.fetch_add(1, Ordering::Relaxed);
        true
    }
}

pub async fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let url = args.url.as_deref().unwrap_or("memory://demo");
    let lock = distlock::connect(url).await?;
    let prefix = run_prefix("demo");
    println!(
        "distlock demo: a flash sale of {} items to {} concurrent buyers, backend {} ({})\n",
        args.items,
        args.buyers,
        lock.name(),
        distlock::redact_url(url),
    );
    println!(
        "  {:<28} {:>6} {:>11} {:>9}",
        "", "sold", "stock left", "oversold"
    );
    let unlocked = sale(&args, None).await?;
    print_sale("1. without a lock", &args, &unlocked);
    let key = LockKey::new(format!("{prefix}/flash-sale"))?;
    let locked = sale(&args, Some((lock.clone(), key))).await?;
    print_sale("2. with a distlock lock", &args, &locked);
    if unlocked.sold > args.items {
        println!(
            "\n  Without the lock, buyers read the same stock and each sold \"the last\" items."
        );
    }
    let fenced = paused_holder(&lock, &prefix).await?;
    let ok = locked.sold == args.items && fenced;
    println!(
        "\n{}",
        if ok {
            "The lock stopped the oversell; the fencing token stopped the paused holder."
        } else {
            "UNEXPECTED: the lock or the fence did not protect the data (see above)."
        }
    );
    Ok(if ok { exit::OK } else { exit::FAILURE })
}

struct Sale {
    sold: u32,
    left: u32,
    took: Duration,
}

async fn sale(args: &DemoArgs, lock: Option<(DynLock, LockKey)>) -> Result<Sale, Failure> {
    let shop = Shop::with_stock(args.items);
    let started = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(120)));
    let mut buyers = tokio::task::JoinSet::new();
    for _ in 0..args.buyers {
        let (shop, lock, opts) = (shop.clone(), lock.clone(), opts.clone());
        buyers.spawn(async move {
            let Some((lock, key)) = lock else {
                shop.buy().await;
                return Ok(());
            };
            let lease = lock.acquire(&key, &opts).await?;
            lease.guard(shop.buy()).await?;
            lease.release().await
        });
    }
    while let Some(joined) = buyers.join_next().await {
        joined.map_err(|e| Failure::new(exit::FAILURE, format!("a buyer task failed: {e}")))??;
    }
    Ok(Sale {
        sold: shop.sold.load(Ordering::Relaxed),
        left: shop.read(),
        took: started.elapsed(),
    })
}

fn print_sale(label: &str, args: &DemoArgs, sale: &Sale) {
    let oversold = sale.sold.saturating_sub(args.items);
    let verdict = if oversold > 0 {
        format!("OVERSOLD by {oversold}")
    } else if sale.sold == args.items {
        format!("exactly {}", args.items)
    } else {
        format!("UNDERSOLD ({} left)", sale.left)
    };
    println!(
        "  {label:<28} {:>6} {:>11} {:>9}   {verdict} in {}",
        sale.sold,
        sale.left,
        oversold,
        show(sale.took),
    );
}

/// Part 3. Returns true when the stale write was refused and the newer one kept.
async fn paused_holder(lock: &DynLock, prefix: &str) -> Result<bool, Failure> {
    let key = LockKey::new(format!("{prefix}/price"))?;
    let ttl = short_ttl(&lock.capabilities(), Duration::from_millis(500));
    let fence = MemoryFence::new();
    let price = Mutex::new(100u32);
    let resource = "price of sku-42";
    let started = Instant::now();
    let row = |who: &str, what: &str, token: Option<FencingToken>, result: &str| {
        let token = token.map(|t| t.to_string()).unwrap_or_default();
        let line = format!(
            "  {:>9}  {who:<3}  {what:<44} {token:<18} {result}",
            show(started.elapsed())
        );
        println!("{}", line.trim_end());
    };
    println!(
        "\n3. A paused holder: ttl {}, manual renewal, every write through a fence\n",
        show(ttl)
    );
    println!(
        "  {:>9}  {:<3}  {:<44} {:<18} result",
        "time", "who", "what", "token"
    );

    let holder_a = AcquireOptions::new()
        .ttl(ttl)
        .renewal(Renewal::Manual)
        .wait(Wait::For(ttl * 4));
    let a = lock.acquire(&key, &holder_a).await?;
    let token_a = a.token();
    row("A", "acquires the lock", Some(token_a), "");
    row("A", "pauses (a GC pause, SIGSTOP, a slow disk)", None, "");

    let holder_b = AcquireOptions::new()
        .ttl(ttl.max(Duration::from_secs(5)))
        .wait(Wait::For(ttl * 4 + Duration::from_secs(10)));
    let b = lock.acquire(&key, &holder_b).await?;
    let token_b = b.token();
    row(
        "B",
        "acquires the lock once A's lease ran out",
        Some(token_b),
        "",
    );
    let written_b = write(&fence, &price, resource, token_b, 90);
    row("B", "writes price=90", Some(token_b), &verdict(&written_b));

    // A wakes with no idea time passed: it checked its lease before the pause.
    row("A", "wakes up, still believing it holds the lock", None, "");
    let written_a = write(&fence, &price, resource, token_a, 80);
    row("A", "writes price=80", Some(token_a), &verdict(&written_a));
    b.release().await?;
    drop(a);

    let final_price = *price.lock().unwrap_or_else(PoisonError::into_inner);
    println!("\n  final price: {final_price} (B's write stands)");
    Ok(written_b.is_ok()
        && matches!(written_a, Err(LockError::StaleToken { .. }))
        && final_price == 90)
}

fn write(
    fence: &MemoryFence,
    price: &Mutex<u32>,
    resource: &str,
    token: FencingToken,
    value: u32,
) -> Result<(), LockError> {
    fence.write_with(resource, token, || {
        *price.lock().unwrap_or_else(PoisonError::into_inner) = value;
    })
}

fn verdict(result: &Result<(), LockError>) -> String {
    match result {
        Ok(()) => "accepted".into(),
        Err(LockError::StaleToken { highest, .. }) => {
            format!("REJECTED: the fence has seen {highest}")
        }
        Err(e) => format!("failed: {e}"),
    }
}
