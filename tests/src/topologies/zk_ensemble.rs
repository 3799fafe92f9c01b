//! A 3-server ZooKeeper ensemble, each server in its own container.
//!
//! The timing rule the partition case checks: a holder cut off from the
//! ensemble learns nothing from the server, so its lease ends at its own local
//! deadline (the last confirmed renewal plus the ttl; a disconnect alone only
//! makes renewals fail). The ensemble frees the lock only when it expires the
//! session, a session timeout (never shorter than the ttl) after it last heard
//! from the client, which is no earlier than that last renewal. So `lost()`
//! fires first, and a waiter elsewhere is granted the lock only after it.

use super::{Case, check_history, hold, key, spawn_waiter, until};
use distlock_core::{AcquireOptions, BoxError, DistributedLock, Wait};
use distlock_testkit::history::History;
use distlock_testkit::servers::zookeeper::Mode;
use distlock_testkit::servers::{ZooKeeperEnsemble, ZooKeeperOptions};
use distlock_zookeeper::{ZkConfig, ZkLock};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(2);

pub(super) fn cases() -> Vec<Case> {
    vec![
        ("minority_holder_loses_first", || {
            Box::pin(minority_holder_loses_first())
        }),
        ("follower_then_leader_killed", || {
            Box::pin(follower_then_leader_killed())
        }),
    ]
}

async fn ensemble() -> Result<ZooKeeperEnsemble, BoxError> {
    Ok(ZooKeeperEnsemble::start(3, &ZooKeeperOptions::default()).await?)
}

async fn connect(ensemble: &ZooKeeperEnsemble, members: &[usize]) -> Result<ZkLock, BoxError> {
    let endpoints: Vec<String> = members
        .iter()
        .filter_map(|index| ensemble.addr(*index))
        .map(|addr| addr.to_string())
        .collect();
    Ok(ZkConfig::new(endpoints)
        .namespace("topology")
        .connect()
        .await?)
}

/// The holder's server (a follower) is cut off: a minority of one. The holder's
/// `lost()` fires before the waiter, on the majority, is granted the lock.
async fn minority_holder_loses_first() -> Result<(), BoxError> {
    let zk = ensemble().await?;
    let leader = zk.leader(Duration::from_secs(30)).await?;
    let minority = (leader + 1) % 3;
    let majority: Vec<usize> = (0..3).filter(|index| *index != minority).collect();
    let holder = connect(&zk, &[minority]).await?;
    let waiter = connect(&zk, &majority).await?;
    let key = key("minority")?;
    let history = History::new();
    let options = AcquireOptions::new().ttl(TTL);
    let lease = holder.acquire(&key, &options).await?;
    let entered = Instant::now();
    // The waiter's own lease must outlive the election the cut starts; an
    // acquire that fails during it (its session could not be kept) queues again.
    let options = AcquireOptions::new()
        .ttl(TTL * 3)
        .wait(Wait::For(Duration::from_secs(20)));
    let waiting = spawn_waiter(waiter, key.clone(), options, Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(300)).await;
    zk.members()[minority].disconnect()?;
    let cut = Instant::now();
    let reason = tokio::time::timeout(TTL * 5, lease.lost())
        .await
        .map_err(|_| "lost() did not fire on the holder cut into the minority")?;
    let lost_after = cut.elapsed();
    history.record_lease(0, &lease, entered);
    let (next, granted) = waiting.await??;
    let grant_after = granted.duration_since(cut);
    history.record_lease(1, &next, granted);
    zk.members()[minority].reconnect()?;
    check_history(&history)?;
    if grant_after < lost_after {
        return Err(format!(
            "the waiter was granted {grant_after:?} after the cut, before the holder's lost() ({lost_after:?})"
        )
        .into());
    }
    println!(
        "lost() ({reason:?}) {lost_after:?} after the cut; next holder {grant_after:?} after it"
    );
    next.release().await?;
    zk.wait_serving(minority, Duration::from_secs(60)).await?;
    Ok(())
}

/// Three clients on every server take turns on one key while a follower is
/// killed and restarted, then the leader is killed: the history stays safe and
/// the lock keeps being granted on the surviving quorum.
async fn follower_then_leader_killed() -> Result<(), BoxError> {
    let zk = ensemble().await?;
    let key = key("kills")?;
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for client in 0..3 {
        let lock = connect(&zk, &[0, 1, 2]).await?;
        let (key, history, stop) = (key.clone(), history.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let options = AcquireOptions::new()
                .ttl(TTL)
                .wait(Wait::For(Duration::from_secs(15)));
            while !stop.load(Ordering::Relaxed) {
                // An acquire across a server's death may fail; it must not grant twice.
                if let Ok(lease) = lock.acquire(&key, &options).await {
                    hold(&history, client, &lease, Duration::from_millis(30)).await;
                    let _ = lease.release().await;
                }
            }
        }));
    }
    let progress = async |what: &str| {
        let before = history.len();
        until(Duration::from_secs(60), what, async || {
            history.len() >= before + 5
        })
        .await
    };
    progress("the first sections").await?;
    let leader = zk.leader(Duration::from_secs(30)).await?;
    let follower = (leader + 1) % 3;
    zk.members()[follower].kill();
    progress("sections with a follower dead").await?;
    zk.restart(follower).await?;
    progress("sections after the follower's restart").await?;
    zk.members()[leader].kill();
    until(Duration::from_secs(60), "a new leader", async || {
        for index in (0..3).filter(|index| *index != leader) {
            if zk.mode(index).await == Mode::Leader {
                return true;
            }
        }
        false
    })
    .await?;
    progress("sections after the leader's death").await?;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }
    let sections = check_history(&history)?;
    println!(
        "{sections} sections; follower {follower} killed and restarted, leader {leader} killed"
    );
    Ok(())
}
