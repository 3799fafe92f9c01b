//! Curator's `InterProcessSemaphoreV2`, `LeaderLatch` and
//! `InterProcessReadWriteLock` (a JVM per holder) against the ZooKeeper
//! adapter's semaphore, election and read-write lock on the same paths:
//! `/interop/%semaphore/{name}`, `/interop/%election/{name}`,
//! `/interop/%rw/{name}`.

use super::{NAMESPACE, client};
use crate::sections::{HANDOFF, WAIT};
use crate::{Named, Shared, unique};
use distlock_core::{AcquireOptions, DistributedLock, Held, LockKey, SingleLease, Wait};
use distlock_testkit::cases::{CaseError, CaseResult, within};
use distlock_testkit::ensure;
use std::sync::Arc;
use std::time::Duration;

pub fn cases() -> Vec<Named> {
    vec![
        Named {
            name: "curator::semaphore_limit_holds_across_curator_and_distlock",
            backend: "zookeeper",
            case: |shared| Box::pin(semaphore_limit_holds_across_curator_and_distlock(shared)),
        },
        Named {
            name: "curator::one_leader_across_leader_latch_and_distlock",
            backend: "zookeeper",
            case: |shared| Box::pin(one_leader_across_leader_latch_and_distlock(shared)),
        },
        Named {
            name: "curator::read_write_exclusion_across_curator_and_distlock",
            backend: "zookeeper",
            case: |shared| Box::pin(read_write_exclusion_across_curator_and_distlock(shared)),
        },
    ]
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().ttl(Duration::from_secs(10))
}

/// The path of primitive `key` under `root` as Curator is given it.
fn path(root: &str, key: &LockKey) -> String {
    format!("/{NAMESPACE}/{root}/{key}")
}

fn missing(what: &str) -> CaseError {
    CaseError::msg(format!("the ZooKeeper client offers no {what}"))
}

/// A semaphore of two: a Curator lease and a distlock permit fill it, so
/// neither side gets a third; each side's release lets the other side in.
pub async fn semaphore_limit_holds_across_curator_and_distlock(shared: Arc<Shared>) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let lock = client(&connect).await?;
    let semaphore = lock.semaphore().ok_or_else(|| missing("semaphore"))?;
    let key = unique("semaphore")?;
    let path = path("%semaphore", &key);
    let mut first = curator.holder(&connect, "semaphore-2", &path).await?;
    let mut second = curator.holder(&connect, "semaphore-2", &path).await?;
    first.acquire(WAIT).await?;
    let permit = semaphore.acquire(&key, 2, &opts()).await?;
    ensure!(
        permit.slot() == 0,
        "distlock's permit has slot {}",
        permit.slot()
    );
    ensure!(
        semaphore.try_acquire(&key, 2, &opts()).await?.is_none(),
        "distlock took a third lease of two"
    );
    ensure!(
        second.try_acquire().await?.is_none(),
        "Curator took a third lease of two"
    );
    let leases = second.participants().await?;
    ensure!(
        leases.len() == 2,
        "Curator sees the leases {leases:?}, not two"
    );

    second.send("acquire").await?;
    permit.release().await?;
    second.acquired(HANDOFF).await?;
    let waiter = tokio::spawn({
        let (semaphore, key) = (semaphore.clone(), key.clone());
        async move {
            semaphore
                .acquire(&key, 2, &opts().wait(Wait::For(WAIT)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "distlock got a lease while Curator held both"
    );
    first.release().await?;
    let permit = within(HANDOFF, "distlock's permit after Curator's release", waiter).await???;
    let leases = second.participants().await?;
    ensure!(
        leases.len() == 2,
        "Curator sees the leases {leases:?}, not two"
    );
    permit.release().await?;
    second.release().await?;
    first.close().await?;
    second.close().await
}

/// A Curator `LeaderLatch` leads: distlock's `leader()` names its id and
/// distlock's campaign waits; once it closes, distlock leads, and a second
/// latch sees distlock's proposal as the leader and leads after it resigns.
pub async fn one_leader_across_leader_latch_and_distlock(shared: Arc<Shared>) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let lock = client(&connect).await?;
    let election = lock.election().ok_or_else(|| missing("election"))?;
    let key = unique("latch")?;
    let path = path("%election", &key);
    let mut latch = curator.holder(&connect, "latch-curator-1", &path).await?;
    latch.acquire(WAIT).await?;
    let leader = election.leader(&key).await?;
    ensure!(
        leader.as_ref().is_some_and(|l| l.owner == "curator-1"),
        "distlock sees {leader:?} as the leader, not curator-1"
    );
    let campaign = tokio::spawn({
        let (election, key) = (election.clone(), key.clone());
        async move { election.campaign(&key, "distlock-1", &opts()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !campaign.is_finished(),
        "distlock leads while Curator's latch does"
    );
    let ids = latch.participants().await?;
    ensure!(
        ids == ["curator-1", "distlock-1"],
        "Curator sees the participants {ids:?}"
    );
    latch.release().await?;
    let leading = within(HANDOFF, "distlock's leadership", campaign).await???;

    let mut next = curator.holder(&connect, "latch-curator-2", &path).await?;
    next.send("acquire").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = next.participants().await?;
    ensure!(
        ids == ["distlock-1", "curator-2"],
        "Curator sees the participants {ids:?}, not distlock leading"
    );
    ensure!(
        !next.acquired_early(),
        "Curator's latch leads while distlock does"
    );
    let term = leading.token();
    leading.release().await?;
    next.acquired(HANDOFF).await?;
    let leader = election.leader(&key).await?;
    ensure!(
        leader
            .as_ref()
            .is_some_and(|l| l.owner == "curator-2" && l.token.is_some_and(|t| t > term)),
        "distlock sees {leader:?} after its term {term}"
    );
    next.release().await?;
    latch.close().await?;
    next.close().await
}

/// Curator's write lock keeps distlock's readers and writers out and the
/// other way round; readers of both sides share.
pub async fn read_write_exclusion_across_curator_and_distlock(shared: Arc<Shared>) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let lock = client(&connect).await?;
    let rwlock = lock.rwlock().ok_or_else(|| missing("read-write lock"))?;
    let key = unique("rw")?;
    let path = path("%rw", &key);
    let mut writer = curator.holder(&connect, "write", &path).await?;
    let mut reader = curator.holder(&connect, "read", &path).await?;

    writer.acquire(WAIT).await?;
    ensure!(
        rwlock.try_read(&key, &opts()).await?.is_none(),
        "distlock read while Curator wrote"
    );
    ensure!(
        rwlock.try_write(&key, &opts()).await?.is_none(),
        "distlock wrote while Curator wrote"
    );
    writer.release().await?;

    let read = rwlock.read(&key, &opts()).await?;
    ensure!(
        reader.try_acquire().await?.is_some(),
        "Curator's reader was kept out by distlock's reader"
    );
    ensure!(
        writer.try_acquire().await?.is_none(),
        "Curator wrote while readers of both sides held"
    );
    reader.release().await?;
    read.release().await?;

    let write = rwlock.write(&key, &opts()).await?;
    ensure!(
        reader.try_acquire().await?.is_none(),
        "Curator read while distlock wrote"
    );
    writer.send("acquire").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !writer.acquired_early(),
        "Curator wrote while distlock wrote"
    );
    write.release().await?;
    writer.acquired(HANDOFF).await?;
    writer.release().await?;
    writer.close().await?;
    reader.close().await
}
