//! A 3-server JetStream cluster, each server in its own container, the lock
//! bucket kept by all three (R3).
//!
//! What the case checks: a holder cut off with its server learns nothing, so
//! its lease ends at its own local deadline, and a contender elsewhere takes
//! over only after watching the holder's revision for a ttl, later, with a
//! higher token, through a compare-and-set on the stream's new leader.
//!
//! Not a case: clients of every server taking turns on one key, with or
//! without the stream's leader killed. On nats-server 2.9.10 (Debian's) that
//! history shows two holders within seconds, because before 2.9.21 a
//! clustered stream checks a write's expected last subject sequence only
//! before proposing it, so two concurrent compare-and-sets from the same
//! revision can both be stored (nats-io/nats-server#4320). The adapter's
//! `pitfalls` warns of a replicated bucket on such a server.

use super::{Case, check_history};
use distlock_core::{AcquireOptions, BoxError, DistributedLock, LockKey, Wait};
use distlock_nats::{NatsConfig, NatsLock};
use distlock_testkit::history::History;
use distlock_testkit::servers::NatsCluster;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(2);

pub(super) fn cases() -> Vec<Case> {
    vec![(
        "holder_server_cut_off",
        || Box::pin(holder_server_cut_off()),
    )]
}

/// A client of `members`, on the R3 bucket, retried while the cluster
/// elects its JetStream leaders (a connect then fails to create the bucket).
async fn connect(cluster: &NatsCluster, members: &[usize]) -> Result<NatsLock, BoxError> {
    let servers: Vec<String> = members
        .iter()
        .filter_map(|index| cluster.members().get(*index))
        .map(|member| member.addr().to_string())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let config = NatsConfig::new(servers.clone())
            .bucket("topology")
            .replicas(3);
        match config.connect().await {
            Ok(lock) => return Ok(lock),
            Err(error) if Instant::now() >= deadline => return Err(error.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The member leading the bucket's stream, as `lock`'s server reports it,
/// once it names one (within 30 s).
async fn stream_leader(cluster: &NatsCluster, lock: &NatsLock) -> Result<usize, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = lock.backend().store().stream.get_info().await;
        let leader = info.ok().and_then(|info| info.cluster?.leader);
        if let Some(index) = leader.as_deref().and_then(|name| cluster.index_of(name)) {
            return Ok(index);
        }
        if Instant::now() >= deadline {
            return Err("the bucket's stream names no leader within 30s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn key(name: &str) -> Result<LockKey, BoxError> {
    Ok(LockKey::new(format!(
        "{name}-{:08x}",
        rand::random::<u32>()
    ))?)
}

/// The holder talks to the stream's leader alone, and that server is cut off
/// the network. The holder's `lost()` fires by its local deadline; a waiter
/// on the other two servers is granted the lock only after that, with a
/// higher token.
async fn holder_server_cut_off() -> Result<(), BoxError> {
    let cluster = NatsCluster::start(3).await?;
    let observer = connect(&cluster, &[0, 1, 2]).await?;
    let cut_off = stream_leader(&cluster, &observer).await?;
    let others: Vec<usize> = (0..3).filter(|index| *index != cut_off).collect();
    let holder = connect(&cluster, &[cut_off]).await?;
    let waiter = connect(&cluster, &others).await?;
    let key = key("cut")?;
    let history = History::new();
    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(TTL))
        .await?;
    let entered = Instant::now();
    let waiting = {
        let key = key.clone();
        let options = AcquireOptions::new()
            .ttl(TTL)
            .wait(Wait::For(Duration::from_secs(20)));
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                // The survivors elect a new stream leader after the cut; an
                // acquire that fails meanwhile tries again.
                match waiter.acquire(&key, &options).await {
                    Ok(lease) => return Ok((lease, Instant::now())),
                    Err(error) if Instant::now() >= deadline => return Err(error),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.members()[cut_off].disconnect()?;
    let cut_at = Instant::now();
    let reason = tokio::time::timeout(TTL * 5, lease.lost())
        .await
        .map_err(|_| "lost() did not fire on the holder whose server was cut off")?;
    let lost_after = cut_at.elapsed();
    history.record_lease(0, &lease, entered);
    let (next, granted) = waiting.await??;
    let grant_after = granted.duration_since(cut_at);
    history.record_lease(1, &next, granted);
    cluster.members()[cut_off].reconnect()?;
    check_history(&history)?;
    if grant_after < lost_after {
        return Err(format!(
            "the waiter was granted {grant_after:?} after the cut, before the holder's lost() ({lost_after:?})"
        )
        .into());
    }
    if next.token() <= lease.token() {
        return Err(format!(
            "the next holder's token {} is not above the cut-off holder's {}",
            next.token(),
            lease.token()
        )
        .into());
    }
    println!(
        "lost() ({reason:?}) {lost_after:?} after the cut; next holder {grant_after:?} after it"
    );
    next.release().await?;
    Ok(())
}
