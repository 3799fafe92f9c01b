//! Apache Curator's `InterProcessMutex` (a real JVM per holder, see
//! `CuratorHolder.java`) and the ZooKeeper adapter on one path: each keeps the
//! other out, each reports the other's node as the holder, and under contention
//! the two never hold at once.
//!
//! Curator's `InterProcessMutex` on `/{namespace}/{name}` is the adapter's lock
//! `name` under `namespace` for names that need no escaping.

use crate::inspect::{expect_queue, holder};
use crate::java::{Curator, CuratorHolder};
use crate::sections::{CONTENDERS, HANDOFF, ROUNDS, Sections, WAIT, distlock_rounds};
use crate::{Named, Shared, cases, unique};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_testkit::cases::{CaseError, CaseResult, within};
use distlock_testkit::ensure;
use distlock_zookeeper::{ZkConfig, ZkLock};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod recipes;

/// The adapter's namespace, so a lock `name` is Curator's path `/interop/name`.
const NAMESPACE: &str = "interop";

pub fn cases() -> Vec<Named> {
    let mut cases = cases!(curator on "zookeeper":
        a_mutex_held_by_curator_blocks_distlock_until_released,
        a_lock_held_by_distlock_blocks_curator_until_released,
        mutual_exclusion_under_contention,
    );
    cases.extend(recipes::cases());
    cases
}

/// Curator holds: distlock sees Curator's node as the holder, cannot take the
/// lock, queues behind it (Curator sees the queued node), and gets the lock
/// right after Curator releases, with a token above Curator's node's czxid;
/// Curator then reports distlock's node as the holder.
pub async fn a_mutex_held_by_curator_blocks_distlock_until_released(
    shared: Arc<Shared>,
) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let lock = Arc::new(client(&connect).await?);
    let key = unique("held-by-curator")?;
    let mut holder = curator.holder(&connect, "mutex", &path(&key)).await?;
    let node = holder.acquire(WAIT).await?;
    ensure!(
        node.starts_with(&format!("{}/_c_", path(&key))) && node.contains("-lock-"),
        "Curator's node {node} is not a protected lock node under {}",
        path(&key)
    );
    let theirs = holder_node(&lock, &key).await?;
    ensure!(
        theirs.0 == node,
        "distlock sees {} as the holder; Curator holds with {node}",
        theirs.0
    );

    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    ensure!(
        lock.try_acquire(&key, &opts).await?.is_none(),
        "distlock acquired a lock Curator holds"
    );
    let waiter = tokio::spawn({
        let (lock, key, wait) = (lock.clone(), key.clone(), opts.wait(Wait::For(WAIT)));
        async move {
            let lease = lock.acquire(&key, &wait).await;
            (Instant::now(), lease)
        }
    });
    expect_queue(&*lock, &key, 2, "distlock's node queued behind Curator's").await?;
    let queue = holder.participants().await?;
    ensure!(
        queue.len() == 2 && queue.first() == Some(&node),
        "Curator sees the queue {queue:?}, not its own node then distlock's"
    );
    ensure!(
        !waiter.is_finished(),
        "distlock acquired while Curator holds the lock"
    );

    let released_at = Instant::now();
    holder.release().await?;
    let (acquired_at, lease) =
        within(HANDOFF, "distlock's hand-off from Curator", waiter).await??;
    let lease = lease?;
    ensure!(
        lease.token().get() > theirs.1,
        "distlock's token {} is not above Curator's czxid {}",
        lease.token(),
        theirs.1
    );
    let ours = holder_node(&lock, &key).await?;
    let queue = holder.participants().await?;
    ensure!(
        queue == [ours.0.clone()],
        "Curator sees the queue {queue:?}; distlock holds with {}",
        ours.0
    );
    lease.release().await?;
    ensure!(
        acquired_at - released_at < HANDOFF,
        "the hand-off from Curator took {:?}",
        acquired_at - released_at
    );
    expect_queue(&*lock, &key, 0, "every node deleted").await?;
    holder.close().await
}

/// distlock holds: Curator reports distlock's node as the holder, its `try`
/// fails, its `acquire` queues behind distlock's node and completes right after
/// distlock releases, with a czxid above distlock's token.
pub async fn a_lock_held_by_distlock_blocks_curator_until_released(
    shared: Arc<Shared>,
) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let lock = client(&connect).await?;
    let key = unique("held-by-distlock")?;
    let mut holder = curator.holder(&connect, "mutex", &path(&key)).await?;
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await?;
    let ours = holder_node(&lock, &key).await?;
    ensure!(
        ours.1 == lease.token().get(),
        "the holder's czxid {} is not the lease's token {}",
        ours.1,
        lease.token()
    );
    let queue = holder.participants().await?;
    ensure!(
        queue == [ours.0.clone()],
        "Curator sees the queue {queue:?}; distlock holds with {}",
        ours.0
    );
    ensure!(
        holder.try_acquire().await?.is_none(),
        "Curator's try acquired a lock distlock holds"
    );

    holder.send("acquire").await?;
    expect_queue(&lock, &key, 2, "Curator's node queued behind distlock's").await?;
    let queue = holder.participants().await?;
    ensure!(
        queue.len() == 2 && queue.first() == Some(&ours.0),
        "Curator sees the queue {queue:?}, not distlock's node {} then its own",
        ours.0
    );
    ensure!(
        !holder.acquired_early(),
        "Curator acquired while distlock holds the lock"
    );

    let released_at = Instant::now();
    lease.release().await?;
    let node = holder.acquired(HANDOFF).await?;
    let took = released_at.elapsed();
    ensure!(
        queue.get(1) == Some(&node),
        "Curator holds with {node}, not the node it queued ({queue:?})"
    );
    let theirs = holder_node(&lock, &key).await?;
    ensure!(
        theirs.0 == node && theirs.1 > ours.1,
        "distlock sees {theirs:?} as the holder; Curator holds with {node}, after czxid {}",
        ours.1
    );
    ensure!(took < HANDOFF, "the hand-off to Curator took {took:?}");
    holder.release().await?;
    expect_queue(&lock, &key, 0, "every node deleted").await?;
    holder.close().await
}

/// Two distlock clients and two Curator JVMs take one lock in turn, eight times
/// each: never two holders at once, no lost update, czxids rising in the order
/// of the sections, and the lock handed across in both directions.
pub async fn mutual_exclusion_under_contention(shared: Arc<Shared>) -> CaseResult {
    let (connect, curator) = (shared.zookeeper().await?, shared.curator().await?);
    let key = unique("contention")?;
    let sections = Arc::new(Sections::default());
    let inspector = Arc::new(client(&connect).await?);
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CONTENDERS {
        let holder = curator.holder(&connect, "mutex", &path(&key)).await?;
        tasks.spawn(curator_rounds(
            holder,
            format!("#{n}"),
            inspector.clone(),
            key.clone(),
            sections.clone(),
        ));
        let lock = client(&connect).await?;
        tasks.spawn(distlock_rounds(
            lock,
            format!("#{n}"),
            key.clone(),
            sections.clone(),
        ));
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    sections.check(2 * CONTENDERS * ROUNDS)?;
    expect_queue(&*inspector, &key, 0, "every node deleted").await
}

/// Curator's rounds; each holding is checked against distlock's view of the
/// holder, whose czxid is the section's token.
async fn curator_rounds(
    mut holder: CuratorHolder,
    who: String,
    inspector: Arc<ZkLock>,
    key: LockKey,
    sections: Arc<Sections>,
) -> CaseResult {
    for _ in 0..ROUNDS {
        let node = holder.acquire(WAIT).await?;
        let seen = holder_node(&inspector, &key).await?;
        ensure!(
            seen.0 == node,
            "Curator {who} holds with {node}; distlock sees {} as the holder",
            seen.0
        );
        sections.run("curator", &who, seen.1).await?;
        holder.release().await?;
    }
    holder.close().await
}

impl Shared {
    /// The connect string of the shared ZooKeeper server, started on first use.
    async fn zookeeper(&self) -> Result<String, CaseError> {
        let server = self
            .zookeeper
            .get_or_try_init(distlock_tests::zookeeper::launch_server)
            .await
            .map_err(|e| CaseError::msg(format!("cannot start ZooKeeper: {e}")))?;
        Ok(server.url())
    }

    /// The compiled Curator holder, built on first use.
    async fn curator(&self) -> Result<&Curator, CaseError> {
        self.curator.get_or_try_init(Curator::build).await
    }
}

async fn client(connect: &str) -> Result<ZkLock, CaseError> {
    Ok(ZkConfig::new([connect])
        .namespace(NAMESPACE)
        .connect()
        .await?)
}

/// Curator's path for the adapter's lock `key`.
fn path(key: &LockKey) -> String {
    format!("/{NAMESPACE}/{key}")
}

/// The holder's node (full path, as Curator names it) and its czxid, as
/// distlock's `Inspect` reads them.
async fn holder_node(lock: &ZkLock, key: &LockKey) -> Result<(String, u64), CaseError> {
    let (node, czxid) = holder(lock, key).await?;
    Ok((format!("{}/{node}", path(key)), czxid))
}
