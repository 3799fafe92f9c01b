//! `distlock check`: a short live conformance run against a user's deployment,
//! with two independent clients, keys under a random `distlock-check/` prefix.

use crate::args::{UrlArg, no_inspect, run_prefix, short_ttl, show};
use crate::exit::{self, Failure};
use distlock::toolkit::Inspect;
use distlock::{AcquireOptions, DynLock, LockError, LockKey, Renewal, Wait};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    url: UrlArg,
    #[arg(long, value_name = "URL", help = store_help())]
    store: Option<String>,
    /// Give up on any one check after this long.
    #[arg(long, default_value = "30s", value_parser = crate::args::parse_positive_duration)]
    timeout: Duration,
}

/// `--store`'s help, with every fenced store of this build.
fn store_help() -> String {
    format!(
        "Also check a fenced store ({}): a write with a lock token is admitted, an older \
         token refused, and the store's settings that can forget admitted tokens are warned about.",
        crate::args::fence_stores()
    )
}

/// Two clients of the deployment and a fresh key space.
struct Bench {
    a: DynLock,
    /// The second client; it also plays the operator who deletes a lock.
    b: DynLock,
    prefix: String,
    short_ttl: Duration,
}

impl Bench {
    fn key(&self, name: &str) -> Result<LockKey, String> {
        LockKey::new(format!("{}/{name}", self.prefix)).map_err(|e| e.to_string())
    }

    /// Whether the second client gets `key` without waiting (a lease it gets is
    /// dropped, which releases it).
    async fn second_gets_at_once(
        &self,
        key: &LockKey,
        opts: &AcquireOptions,
    ) -> Result<bool, String> {
        let lease = self.b.try_acquire(key, opts).await.map_err(text)?;
        Ok(lease.is_some())
    }

    /// The operator's view of the deployment, or why there is none.
    fn inspect(&self) -> Result<&dyn Inspect, String> {
        self.b.inspect().ok_or_else(|| no_inspect(&self.b))
    }
}

type Outcome = Result<String, String>;

pub async fn check(args: CheckArgs) -> Result<u8, Failure> {
    let url = args.url.require()?.to_owned();
    let a = distlock::connect(&url).await?;
    let b = distlock::connect(&url).await?;
    let caps = a.capabilities();
    let bench = Bench {
        short_ttl: short_ttl(&caps, Duration::from_secs(1)),
        a,
        b,
        prefix: run_prefix("check"),
    };
    println!(
        "distlock check: {} at {} (keys under {}/)",
        bench.a.name(),
        distlock::redact_url(&url),
        bench.prefix
    );
    if let Ok(inspect) = bench.inspect() {
        match inspect.topology().await {
            Ok(Some(topology)) => println!("topology: {topology}"),
            Ok(None) => {}
            Err(e) => println!("topology not read: {e}"),
        }
        println!("{}", crate::status::state_line(inspect).await);
    }
    let mut tally = Tally::default();
    for (name, step) in STEPS {
        tally.run(name, args.timeout, step.run(&bench)).await;
    }
    let mut pitfalls = match bench.inspect() {
        Ok(inspect) => inspect
            .pitfalls()
            .await
            .unwrap_or_else(|e| vec![format!("cannot look for deployment pitfalls: {e}")]),
        Err(why) => vec![format!("deployment pitfalls not checked: {why}")],
    };
    if let Some(store_url) = &args.store {
        let store = distlock::connect_fence(store_url).await?;
        let check = fenced_writes(&bench, &*store);
        tally
            .run("fenced store refuses stale", args.timeout, check)
            .await;
        pitfalls.extend(
            store
                .pitfalls()
                .await
                .unwrap_or_else(|e| vec![format!("cannot look for the store's pitfalls: {e}")]),
        );
    }
    let Tally { passed, failed } = tally;
    println!("check: {passed} of {} passed", passed + failed);
    for warning in pitfalls {
        println!("warning: {warning}");
    }
    Ok(if failed == 0 { exit::OK } else { exit::FAILURE })
}

/// The checks run so far.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

impl Tally {
    /// Runs one check for at most `limit` and prints its PASS or FAIL line.
    async fn run(&mut self, name: &str, limit: Duration, check: impl Future<Output = Outcome>) {
        let started = Instant::now();
        let outcome = tokio::time::timeout(limit, check)
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {}", show(limit))));
        let took = show(started.elapsed());
        match outcome {
            Ok(detail) => {
                self.passed += 1;
                println!("  PASS  {name:<30} {took:>8}  {detail}");
            }
            Err(detail) => {
                self.failed += 1;
                println!("  FAIL  {name:<30} {took:>8}  {detail}");
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    AcquireRelease,
    Exclusion,
    RisingTokens,
    Expiry,
    LostOnDeletion,
}

const STEPS: [(&str, Step); 5] = [
    ("acquire and release", Step::AcquireRelease),
    ("exclusion between two clients", Step::Exclusion),
    ("fencing tokens rise", Step::RisingTokens),
    ("expiry with a short ttl", Step::Expiry),
    ("lost signal on deletion", Step::LostOnDeletion),
];

impl Step {
    async fn run(self, bench: &Bench) -> Outcome {
        match self {
            Step::AcquireRelease => acquire_release(bench).await,
            Step::Exclusion => exclusion(bench).await,
            Step::RisingTokens => rising_tokens(bench).await,
            Step::Expiry => expiry(bench).await,
            Step::LostOnDeletion => lost_on_deletion(bench).await,
        }
    }
}

/// Two holders in turn write to one resource of the store with their tokens;
/// the first one's late write must be refused and change nothing.
async fn fenced_writes(bench: &Bench, store: &dyn distlock::Fence) -> Outcome {
    let key = bench.key("fenced")?;
    let resource = format!("{}/fenced", bench.prefix);
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(10)));
    let first = bench.a.acquire(&key, &opts).await.map_err(text)?;
    let old = first.token();
    first.release().await.map_err(text)?;
    let second = bench.b.acquire(&key, &opts).await.map_err(text)?;
    let new = second.token();
    second.release().await.map_err(text)?;
    let set = |value: &str| distlock::FencedWrite::set(value);
    store
        .write(&resource, new, set("new"))
        .await
        .map_err(text)?;
    match store.write(&resource, old, set("old")).await {
        Err(LockError::StaleToken { .. }) => {}
        other => {
            return Err(format!(
                "the older token {old} gave {other:?}, not a refusal"
            ));
        }
    }
    let value = store.read(&resource).await.map_err(text)?;
    store
        .write(&resource, new, distlock::FencedWrite::Delete)
        .await
        .map_err(text)?;
    match value.as_deref() {
        Some("new") => Ok(format!(
            "token {old} refused after {new}; the token record stays"
        )),
        other => Err(format!("the value is {other:?} after the refused write")),
    }
}

fn text(e: LockError) -> String {
    e.to_string()
}

async fn acquire_release(bench: &Bench) -> Outcome {
    let key = bench.key("basic")?;
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)));
    let first = bench.a.acquire(&key, &opts).await.map_err(text)?;
    let t1 = first.token();
    first.release().await.map_err(text)?;
    let second = bench.a.acquire(&key, &opts).await.map_err(text)?;
    let t2 = second.token();
    second.release().await.map_err(text)?;
    Ok(format!("tokens {t1} then {t2}, released"))
}

async fn exclusion(bench: &Bench) -> Outcome {
    let key = bench.key("exclusion")?;
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)));
    let held = bench.a.acquire(&key, &opts).await.map_err(text)?;
    if bench.second_gets_at_once(&key, &opts).await? {
        return Err("a second client acquired a held lock".into());
    }
    let short = opts.clone().wait(Wait::For(Duration::from_millis(300)));
    match bench.b.acquire(&key, &short).await {
        Err(LockError::Timeout { .. }) => {}
        Ok(_) => return Err("a waiting client acquired a held lock".into()),
        Err(e) => return Err(e.to_string()),
    }
    held.release().await.map_err(text)?;
    let next = bench.b.acquire(&key, &opts).await.map_err(text)?;
    next.release().await.map_err(text)?;
    Ok("second client refused while held, admitted after release".into())
}

async fn rising_tokens(bench: &Bench) -> Outcome {
    let key = bench.key("tokens")?;
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(5)));
    let mut tokens = Vec::new();
    for client in [&bench.a, &bench.b, &bench.a, &bench.b] {
        let lease = client.acquire(&key, &opts).await.map_err(text)?;
        tokens.push(lease.token());
        lease.release().await.map_err(text)?;
    }
    let shown: Vec<String> = tokens.iter().map(ToString::to_string).collect();
    if tokens.windows(2).all(|w| w[0] < w[1]) {
        Ok(format!("{} across two clients", shown.join(" < ")))
    } else {
        Err(format!(
            "tokens did not strictly rise: {}",
            shown.join(", ")
        ))
    }
}

async fn expiry(bench: &Bench) -> Outcome {
    let key = bench.key("expiry")?;
    let ttl = bench.short_ttl;
    let crashed = AcquireOptions::new()
        .ttl(ttl)
        .renewal(Renewal::Manual)
        .wait(Wait::For(Duration::from_secs(5)));
    let lease = bench.a.acquire(&key, &crashed).await.map_err(text)?;
    let (token, acquired_at) = (lease.token(), Instant::now());
    // A crashed holder: no release, no renewal; only the ttl frees the lock.
    lease.abandon();
    let opts = AcquireOptions::new().wait(Wait::For(ttl * 3 + Duration::from_secs(5)));
    if bench.second_gets_at_once(&key, &opts).await? {
        return Err("the lock was free right after a holder vanished, before its ttl".into());
    }
    let next = bench.b.acquire(&key, &opts).await.map_err(text)?;
    let after = acquired_at.elapsed();
    let next_token = next.token();
    next.release().await.map_err(text)?;
    if next_token <= token {
        return Err(format!(
            "token {next_token} after expiry is not above {token}"
        ));
    }
    Ok(format!(
        "freed {} after a ttl of {}",
        show(after),
        show(ttl)
    ))
}

async fn lost_on_deletion(bench: &Bench) -> Outcome {
    let key = bench.key("lost")?;
    let ttl = bench.short_ttl.max(Duration::from_secs(3));
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Wait::For(Duration::from_secs(5)));
    let operator = bench.inspect()?;
    let lease = bench.a.acquire(&key, &opts).await.map_err(text)?;
    if !operator.delete_holder(&key).await.map_err(text)? {
        return Err("the operator deletion found no lock to delete".into());
    }
    let deleted_at = Instant::now();
    // Renewal runs every ttl/3, so loss must be known within about a ttl.
    let bound = ttl + Duration::from_secs(2);
    let reason = tokio::time::timeout(bound, lease.lost())
        .await
        .map_err(|_| format!("lost() did not fire within {} of the deletion", show(bound)))?;
    if lease.is_held() {
        return Err("lost() fired but is_held() still says true".into());
    }
    Ok(format!(
        "lost() after {}: {reason}",
        show(deleted_at.elapsed())
    ))
}
