//! `distlock demo`: why a lock, and why a lock is not enough.
//!
//! The stock and the price live in a fenced store (process memory, or a backend
//! that also stores data), and every write goes through it with the writer's token.
//!
//! 1. A flash sale without a lock: buyers read the stock, take a moment to pay,
//!    and write stock-1. Reads interleave, so more items are sold than exist.
//! 2. The same sale with the lock held around read-pay-write: exactly the stock.
//! 3. A holder that pauses past its ttl (GC, SIGSTOP) still believes it holds the
//!    lock when it wakes. Its late write is refused by the store itself, because
//!    a newer holder already wrote with a higher token.

use crate::args::{fence_stores, run_prefix, short_ttl, show};
use crate::exit::{self, Failure};
use distlock::{
    AcquireOptions, DynLock, Fence, FencedWrite, FencingToken, LockError, LockKey, Renewal, Wait,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Backend URL (default: memory://demo, in this process).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    #[arg(long, value_name = "URL", help = store_help())]
    store: Option<String>,
    /// Items in stock.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    items: u32,
    /// Concurrent buyers.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    buyers: u32,
}

/// `--store`'s help: every fenced store of this build.
fn store_help() -> String {
    format!(
        "Where the stock and the price live: {} (default: the --url store when it is one of \
         those, else process memory).",
        fence_stores()
    )
}

/// Without a lock there is no token: every unlocked buyer writes with token 0,
/// which the fence admits every time (equal tokens are admitted), so it
/// protects nothing, as a plain `UPDATE` would not.
const NO_TOKEN: FencingToken = FencingToken::new(0);

/// The shop's stock in the store, read and written in two steps as an
/// application does with `SELECT` then `UPDATE`.
struct Shop {
    store: Arc<dyn Fence>,
    stock: String,
    sold: AtomicU32,
}

impl Shop {
    async fn open(store: &Arc<dyn Fence>, stock: String, items: u32) -> Result<Arc<Self>, Failure> {
        store
            .write(&stock, NO_TOKEN, FencedWrite::set(items.to_string()))
            .await?;
        Ok(Arc::new(Shop {
            store: store.clone(),
            stock,
            sold: AtomicU32::new(0),
        }))
    }

    async fn read(&self) -> Result<u32, LockError> {
        let text = self.store.read(&self.stock).await?.unwrap_or_default();
        text.parse().map_err(|_| LockError::InvalidWrite {
            reason: format!("the stock `{}` holds {text:?}, not a count", self.stock),
        })
    }

    /// One purchase: read, pay (a short await), write. Not atomic on purpose.
    async fn buy(&self, token: FencingToken) -> Result<bool, LockError> {
        let left = self.read().await?;
        if left == 0 {
            return Ok(false);
        }
        // The payment call: other buyers run meanwhile.
        tokio::time::sleep(Duration::from_micros(rand::random_range(100..1500))).await;
        let write = FencedWrite::set((left - 1).to_string());
        self.store.write(&self.stock, token, write).await?;
        self.sold.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// The store behind `url`, if its backend is also a fenced store.
fn store_url(url: &str) -> Option<&str> {
    let registration = distlock::BackendKind::from_url(url).ok()?.registration()?;
    registration.has_fence().then_some(url)
}

pub async fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let url = args.url.as_deref().unwrap_or("memory://demo");
    let lock = distlock::connect(url).await?;
    let store_url = args
        .store
        .as_deref()
        .or_else(|| store_url(url))
        .unwrap_or("memory://demo");
    let store = distlock::connect_fence(store_url).await?;
    let prefix = run_prefix("demo");
    println!(
        "distlock demo: a flash sale of {} items to {} concurrent buyers, backend {} ({}), \
         stock in {}\n",
        args.items,
        args.buyers,
        lock.name(),
        distlock::redact_url(url),
        distlock::redact_url(store_url),
    );
    println!(
        "  {:<28} {:>6} {:>11} {:>9}",
        "", "sold", "stock left", "oversold"
    );
    let unlocked = Shop::open(&store, format!("{prefix}/stock-unlocked"), args.items).await?;
    let unlocked = sale(&args, unlocked, None).await?;
    print_sale("1. without a lock", &args, &unlocked);
    let key = LockKey::new(format!("{prefix}/flash-sale"))?;
    let locked = Shop::open(&store, format!("{prefix}/stock-locked"), args.items).await?;
    let locked = sale(&args, locked, Some((lock.clone(), key))).await?;
    print_sale("2. with a distlock lock", &args, &locked);
    if unlocked.sold > args.items {
        println!(
            "\n  Without the lock, buyers read the same stock and each sold \"the last\" items."
        );
    }
    let fenced = paused_holder(&lock, &store, &prefix).await?;
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

async fn sale(
    args: &DemoArgs,
    shop: Arc<Shop>,
    lock: Option<(DynLock, LockKey)>,
) -> Result<Sale, Failure> {
    let started = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(120)));
    let mut buyers = tokio::task::JoinSet::new();
    for _ in 0..args.buyers {
        let (shop, lock, opts) = (shop.clone(), lock.clone(), opts.clone());
        buyers.spawn(async move {
            let Some((lock, key)) = lock else {
                return shop.buy(NO_TOKEN).await.map(drop);
            };
            let lease = lock.acquire(&key, &opts).await?;
            lease.guard(shop.buy(lease.token())).await??;
            lease.release().await
        });
    }
    while let Some(joined) = buyers.join_next().await {
        joined.map_err(|e| Failure::new(exit::FAILURE, format!("a buyer task failed: {e}")))??;
    }
    Ok(Sale {
        sold: shop.sold.load(Ordering::Relaxed),
        left: shop.read().await?,
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
async fn paused_holder(
    lock: &DynLock,
    store: &Arc<dyn Fence>,
    prefix: &str,
) -> Result<bool, Failure> {
    let key = LockKey::new(format!("{prefix}/price"))?;
    let ttl = short_ttl(&lock.capabilities(), Duration::from_millis(500));
    let resource = format!("{prefix}/price-of-sku-42");
    store
        .write(&resource, NO_TOKEN, FencedWrite::set("100"))
        .await?;
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
    let written_b = store
        .write(&resource, token_b, FencedWrite::set("90"))
        .await;
    row("B", "writes price=90", Some(token_b), &verdict(&written_b));

    // A wakes with no idea time passed: it checked its lease before the pause.
    row("A", "wakes up, still believing it holds the lock", None, "");
    let written_a = store
        .write(&resource, token_a, FencedWrite::set("80"))
        .await;
    row("A", "writes price=80", Some(token_a), &verdict(&written_a));
    b.release().await?;
    drop(a);

    let final_price = store.read(&resource).await?.unwrap_or_default();
    println!("\n  final price: {final_price} (B's write stands)");
    Ok(written_b.is_ok()
        && matches!(written_a, Err(LockError::StaleToken { .. }))
        && final_price == "90")
}

fn verdict<T>(result: &Result<T, LockError>) -> String {
    match result {
        Ok(_) => "accepted".into(),
        Err(LockError::StaleToken { highest, .. }) => {
            format!("REJECTED by the store: it admitted {highest}")
        }
        Err(e) => format!("failed: {e}"),
    }
}
