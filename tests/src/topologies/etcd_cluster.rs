//! A 3-member etcd cluster, each member in its own container: the leader killed
//! while a lock is held and others queue, the leader partitioned away from its
//! holder, a member restarted.

use super::{Case, check_history, hold, key, spawn_waiter, until};
use distlock_core::{AcquireOptions, BoxError, DistributedLock, Wait};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::history::History;
use distlock_testkit::servers::EtcdCluster;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The cluster's lease ttl: twice etcd's 1 s election timeout here.
const TTL: Duration = Duration::from_secs(2);

pub(super) fn cases() -> Vec<Case> {
    vec![
        ("leader_kill_under_contention", || {
            Box::pin(leader_kill_under_contention())
        }),
        ("partitioned_leader_loses_its_holder", || {
            Box::pin(partitioned_leader_loses_its_holder())
        }),
        ("member_restart_keeps_the_lock", || {
            Box::pin(member_restart_keeps_the_lock())
        }),
    ]
}

async fn cluster() -> Result<EtcdCluster, BoxError> {
    Ok(EtcdCluster::start(3).await?)
}

async fn connect(addrs: &[SocketAddr]) -> Result<EtcdLock, BoxError> {
    Ok(EtcdConfig::new(addrs.iter().map(ToString::to_string))
        .namespace("topology/")
        .connect()
        .await?)
}

fn addrs(cluster: &EtcdCluster, except: Option<usize>) -> Vec<SocketAddr> {
    (0..cluster.members().len())
        .filter(|index| Some(*index) != except)
        .map(|index| cluster.members()[index].addr())
        .collect()
}

/// Three clients take turns on one key while the leader is killed, a new one
/// elected, and the old one restarted: the history stays safe, and the lock
/// keeps being granted after the election.
async fn leader_kill_under_contention() -> Result<(), BoxError> {
    let etcd = cluster().await?;
    let all = addrs(&etcd, None);
    let key = key("contended")?;
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for client in 0..3 {
        let lock = connect(&all).await?;
        let (key, history, stop) = (key.clone(), history.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let options = AcquireOptions::new()
                .ttl(TTL)
                .wait(Wait::For(Duration::from_secs(15)));
            let mut errors = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match lock.acquire(&key, &options).await {
                    Ok(lease) => {
                        hold(&history, client, &lease, Duration::from_millis(30)).await;
                        let _ = lease.release().await;
                    }
                    // An acquire during the election may fail; it must not grant twice.
                    Err(_) => errors += 1,
                }
            }
            errors
        }));
    }
    until(Duration::from_secs(20), "the first sections", async || {
        history.len() >= 5
    })
    .await?;
    let leader = etcd.wait_for_leader(Duration::from_secs(10)).await?;
    etcd.members()[leader].kill();
    let before = history.len();
    let new_leader = etcd.wait_for_leader(Duration::from_secs(20)).await?;
    if new_leader == leader {
        return Err("the killed member is still the leader".into());
    }
    until(
        Duration::from_secs(30),
        "sections after the leader kill",
        async || history.len() >= before + 5,
    )
    .await?;
    etcd.members()[leader].restart().await?;
    let after_restart = history.len();
    until(
        Duration::from_secs(30),
        "sections after the restart",
        async || history.len() >= after_restart + 5,
    )
    .await?;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }
    let sections = check_history(&history)?;
    println!("{sections} sections, leader {leader} killed and restarted");
    Ok(())
}

/// The holder talks to the leader only; the leader is cut off the network. The
/// holder's lease cannot be kept alive, so `lost()` fires, and it fires before
/// the waiter (talking to the other two) is granted the lock.
async fn partitioned_leader_loses_its_holder() -> Result<(), BoxError> {
    let etcd = cluster().await?;
    let leader = etcd.wait_for_leader(Duration::from_secs(10)).await?;
    let holder = connect(&[etcd.members()[leader].addr()]).await?;
    let waiter = connect(&addrs(&etcd, Some(leader))).await?;
    let key = key("partitioned")?;
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
    // Let the waiter queue behind the holder before the cut.
    tokio::time::sleep(Duration::from_millis(300)).await;
    etcd.members()[leader].disconnect()?;
    let cut = Instant::now();
    let reason = tokio::time::timeout(TTL * 5, lease.lost())
        .await
        .map_err(|_| "lost() did not fire on the cut-off holder")?;
    let lost_after = cut.elapsed();
    history.record_lease(0, &lease, entered);
    let (next, granted) = waiting.await??;
    let grant_after = granted.duration_since(cut);
    history.record_lease(1, &next, granted);
    etcd.members()[leader].reconnect()?;
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
    drop(lease);
    // The cluster heals: the cut-off member rejoins and answers again.
    until(
        Duration::from_secs(30),
        "the old leader rejoins",
        async || {
            etcd.members()[leader]
                .status()
                .await
                .is_ok_and(|status| status.leader != 0)
        },
    )
    .await?;
    Ok(())
}

/// A member restart (the leader's, the hardest) under a held lock: the lease
/// survives, no one else gets the lock, and the next token is higher.
async fn member_restart_keeps_the_lock() -> Result<(), BoxError> {
    let etcd = cluster().await?;
    let all = addrs(&etcd, None);
    let holder = connect(&all).await?;
    let contender = connect(&all).await?;
    let key = key("restart")?;
    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(TTL * 2))
        .await?;
    let leader = etcd.wait_for_leader(Duration::from_secs(10)).await?;
    etcd.members()[leader].restart().await?;
    etcd.wait_for_leader(Duration::from_secs(20)).await?;
    let try_once = AcquireOptions::new().ttl(TTL).wait(Wait::No);
    let until_when = Instant::now() + TTL * 3;
    while Instant::now() < until_when {
        if !lease.is_held() {
            return Err("the lease was lost over a member restart".into());
        }
        if let Ok(Some(_)) = contender.try_acquire(&key, &try_once).await {
            return Err("a contender got the held lock after the restart".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let token = lease.token();
    lease.release().await?;
    let next = contender
        .acquire(
            &key,
            &AcquireOptions::new().wait(Wait::For(Duration::from_secs(10))),
        )
        .await?;
    if next.token() <= token {
        return Err(format!("token {} after {token} did not rise", next.token()).into());
    }
    next.release().await?;
    Ok(())
}
