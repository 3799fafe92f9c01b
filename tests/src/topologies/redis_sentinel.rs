//! Redis through Sentinel, every server in its own container: a primary, one
//! replica and three Sentinels, reached with `redis+sentinel://` (the Sentinels
//! announce container addresses, which the host dials over the bridge). The
//! failover hole is built on purpose: the replica is cut off the network, a lock
//! is taken on the primary alone, the primary is killed and the replica, back on
//! the network, promoted. Then a forced `SENTINEL FAILOVER` under contention,
//! with the rate of unsafe sections printed.

use super::{Case, hold, until};
use distlock_core::{AcquireOptions, BoxError, DistributedLock, Fence, FencedWrite};
use distlock_core::{LockError, LockKey, Renewal, Wait};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::history::History;
use distlock_testkit::servers::{RedisOptions, RedisServer, SentinelOptions, SentinelTopology};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a failover may take here: 1 s to be judged down, an election (retried
/// after twice the failover timeout when no replica qualified yet), the promotion.
const FAILOVER_BOUND: Duration = Duration::from_secs(45);

pub(super) fn cases() -> Vec<Case> {
    vec![
        ("failover_hole_after_a_replica_cut", || {
            Box::pin(failover_hole_after_a_replica_cut())
        }),
        ("forced_failover_under_contention", || {
            Box::pin(forced_failover_under_contention())
        }),
    ]
}

/// A settled topology whose replica is past its first sync.
async fn topology() -> Result<SentinelTopology, BoxError> {
    let topology = SentinelTopology::start(SentinelOptions {
        down_after: Duration::from_secs(1),
        failover_timeout: Duration::from_secs(3),
        ..SentinelOptions::default()
    })
    .await?;
    topology.settled().await?;
    topology.replica_online().await?;
    Ok(topology)
}

async fn client(url: &str) -> Result<RedisLock, BoxError> {
    Ok(RedisConfig::from_url(url)?
        .namespace("topology:")
        .connect()
        .await?)
}

fn new_key(name: &str) -> Result<LockKey, BoxError> {
    Ok(LockKey::new(format!(
        "{name}-{:08x}",
        rand::random::<u32>()
    ))?)
}

/// Waits until the Sentinels name `server` as the primary.
async fn promoted(topology: &SentinelTopology, server: SocketAddr) -> Result<(), BoxError> {
    until(FAILOVER_BOUND, "the replica promoted", async || {
        topology.named_primary().await == Some(server)
    })
    .await
}

async fn failover_hole_after_a_replica_cut() -> Result<(), BoxError> {
    let topology = topology().await?;
    // The protected resource lives apart from the failing topology, and its
    // record of the highest token survives anything (append-only, fsync always).
    let store = RedisServer::start_with(RedisOptions {
        aof: true,
        ..RedisOptions::default()
    })
    .await?;
    let fence = RedisConfig::from_url(&store.url())?.connect_fence().await?;
    let key = new_key("hole")?;
    let held_long = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait(Wait::No)
        // No renewal could notice the loss: the first lease stays valid on its
        // own clock for the whole case, as a paused or unlucky holder's would.
        .renewal(Renewal::Manual);

    topology.replica().disconnect()?;
    // With wait_replicas=1 the primary alone cannot grant: the acquire fails
    // (and is undone) instead of returning a lease the replica never saw.
    let acked = client(&format!(
        "{}?wait_replicas=1&wait_timeout=300ms",
        topology.url()
    ))
    .await?;
    match acked.acquire(&new_key("acked")?, &held_long).await {
        Err(error) if error.to_string().contains("only 0 of 1 replicas") => {}
        Err(error) => return Err(format!("wait_replicas=1 failed otherwise: {error}").into()),
        Ok(lease) => {
            return Err(format!(
                "wait_replicas=1 granted {:?} with the replica cut off",
                lease.token()
            )
            .into());
        }
    }
    // Without it the primary grants alone, and the replica never hears of it.
    let first = client(&topology.url()).await?;
    let lease = first.acquire(&key, &held_long).await?;
    let entered = Instant::now();
    fence
        .write("doc", lease.token(), FencedWrite::set("first"))
        .await?;

    let killed = Instant::now();
    topology.primary().kill();
    topology.replica().reconnect()?;
    promoted(&topology, topology.replica().addr()).await?;
    let promoted_after = killed.elapsed();

    let second = client(&topology.url()).await?;
    let wait = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Wait::For(FAILOVER_BOUND));
    let taken = second.acquire(&key, &wait).await?;
    let granted = Instant::now();
    // The hole: a second holder while the first lease is still valid locally.
    if !lease.is_held() {
        return Err("the first lease was no longer held when the second was granted".into());
    }
    let left_at_grant = lease.remaining();
    let history = History::new();
    history.record_lease(0, &lease, entered);
    history.record_lease(1, &taken, granted);
    if history.check().is_empty() {
        return Err("no overlap recorded: the failover hole was not built".into());
    }
    // Tokens still rise (a lost counter is seeded from the server clock), so a
    // store that kept its highest token refuses the stale holder.
    if taken.token() <= lease.token() {
        return Err(format!("token {:?} after {:?}", taken.token(), lease.token()).into());
    }
    fence
        .write("doc", taken.token(), FencedWrite::set("second"))
        .await?;
    match fence
        .write("doc", lease.token(), FencedWrite::set("stale"))
        .await
    {
        Err(LockError::StaleToken { .. }) => {}
        other => return Err(format!("the stale holder's write was not refused: {other:?}").into()),
    }
    if fence.read("doc").await?.as_deref() != Some("second") {
        return Err("the stale write changed the resource".into());
    }
    // The first holder learns of the loss only when it asks the new primary.
    if lease.renew().await.is_ok() {
        return Err("the first lease renewed on the promoted replica".into());
    }
    println!(
        "replica cut, lock taken on the primary alone, primary killed: replica promoted \
         {promoted_after:?} later, lock granted again {:?} after the kill while the first \
         lease had {:?} left; the fence refused the stale token",
        granted.duration_since(killed),
        left_at_grant
    );
    taken.release().await?;
    Ok(())
}

async fn forced_failover_under_contention() -> Result<(), BoxError> {
    let topology = topology().await?;
    let key = new_key("forced")?;
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for client_id in 0..3 {
        let lock = client(&topology.url()).await?;
        let (key, history, stop) = (key.clone(), history.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let options = AcquireOptions::new()
                .ttl(Duration::from_secs(2))
                .wait(Wait::For(Duration::from_secs(10)));
            let mut errors = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match lock.acquire(&key, &options).await {
                    Ok(lease) => {
                        hold(&history, client_id, &lease, Duration::from_millis(20)).await;
                        let _ = lease.release().await;
                    }
                    // During the switch an acquire may fail; the history judges it.
                    Err(_) => errors += 1,
                }
            }
            errors
        }));
    }
    until(Duration::from_secs(20), "the first sections", async || {
        history.len() >= 10
    })
    .await?;
    let before = history.len();
    let forced = Instant::now();
    topology.force_failover().await?;
    promoted(&topology, topology.replica().addr()).await?;
    let promoted_after = forced.elapsed();
    let at_promotion = history.len();
    until(
        Duration::from_secs(30),
        "sections on the promoted replica",
        async || history.len() >= at_promotion + 10,
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for worker in workers {
        errors += worker.await?;
    }
    let sections = history.len();
    let violations = history.check();
    println!(
        "forced failover: promoted {promoted_after:?} after SENTINEL FAILOVER; {sections} sections \
         ({before} before it), {} violations ({:.2}% of sections), {errors} failed acquires",
        violations.len(),
        100.0 * violations.len() as f64 / sections as f64
    );
    Ok(())
}
