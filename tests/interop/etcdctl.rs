//! etcd's own `etcdctl lock` (the Go `concurrency.Mutex`) and the etcd adapter
//! on one name: each keeps the other out in one FIFO queue, and under
//! contention the two never hold at once. `etcdctl elect` against the
//! adapter's election is in `elect.rs`.
//!
//! `etcdctl` keeps its locks and elections at the root of the keyspace, the
//! adapter's namespace `""`, where a name without `/` or `%` is the same queue
//! for both.

mod elect;

pub use elect::{distlock_leads_etcdctl_elect_follows, etcdctl_elect_leads_distlock_follows};

use crate::inspect::{expect_queue, holder};
use crate::sections::{CONTENDERS, HANDOFF, ROUNDS, Sections, WAIT, distlock_rounds};
use crate::{Named, Shared, cases, unique};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::cases::{CaseError, CaseResult, within};
use distlock_testkit::ensure;
use distlock_testkit::servers::EtcdServer;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

pub fn cases() -> Vec<Named> {
    cases!(etcdctl on "etcd":
        a_lock_held_by_etcdctl_blocks_distlock_until_it_unlocks,
        a_lock_held_by_distlock_blocks_etcdctl_until_released,
        a_slash_name_held_by_distlock_leaves_its_prefix_free,
        mutual_exclusion_under_contention,
        etcdctl_elect_leads_distlock_follows,
        distlock_leads_etcdctl_elect_follows,
    )
}

/// `etcdctl lock` holds: distlock sees etcdctl's key as the holder, cannot take
/// the lock, queues behind it, and gets the lock right after etcdctl unlocks
/// (on SIGTERM), with a token above etcdctl's key's create revision.
pub async fn a_lock_held_by_etcdctl_blocks_distlock_until_it_unlocks(
    shared: Arc<Shared>,
) -> CaseResult {
    let etcd = shared.etcd().await?;
    let lock = Arc::new(client(etcd).await?);
    let key = unique("held-by-etcdctl")?;
    let mut etcdctl = EtcdctlLock::hold(etcd, &key).await?;
    let theirs = holder(&*lock, &key).await?;
    ensure!(
        format!("{key}/{}", theirs.0) == etcdctl.key,
        "distlock sees {theirs:?} as the holder; etcdctl holds with {}",
        etcdctl.key
    );

    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    ensure!(
        lock.try_acquire(&key, &opts).await?.is_none(),
        "distlock acquired a lock etcdctl holds"
    );
    let waiter = tokio::spawn({
        let (lock, key, wait) = (lock.clone(), key.clone(), opts.wait(Wait::For(WAIT)));
        async move {
            let lease = lock.acquire(&key, &wait).await;
            (Instant::now(), lease)
        }
    });
    expect_queue(&*lock, &key, 2, "distlock's key queued behind etcdctl's").await?;
    ensure!(
        !waiter.is_finished(),
        "distlock acquired while etcdctl holds the lock"
    );

    let unlocked_at = Instant::now();
    etcdctl.unlock().await?;
    let (acquired_at, lease) =
        within(HANDOFF, "distlock's hand-off from etcdctl", waiter).await??;
    let lease = lease?;
    ensure!(
        lease.token().get() > theirs.1,
        "distlock's token {} is not above etcdctl's revision {}",
        lease.token(),
        theirs.1
    );
    lease.release().await?;
    ensure!(
        acquired_at - unlocked_at < HANDOFF,
        "the hand-off from etcdctl took {:?}",
        acquired_at - unlocked_at
    );
    expect_queue(&*lock, &key, 0, "every key deleted").await
}

/// distlock holds: etcdctl's own listing puts distlock's key first (the holder
/// by etcdctl's rule), `etcdctl lock NAME CMD` queues behind it and runs CMD
/// only after distlock releases, with the key it queued.
pub async fn a_lock_held_by_distlock_blocks_etcdctl_until_released(
    shared: Arc<Shared>,
) -> CaseResult {
    let etcd = shared.etcd().await?;
    let lock = client(etcd).await?;
    let key = unique("held-by-distlock")?;
    let lease = lock
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(10)))
        .await?;
    let ours = holder(&lock, &key).await?;
    ensure!(
        ours.1 == lease.token().get(),
        "the holder's revision {} is not the lease's token {}",
        ours.1,
        lease.token()
    );
    // etcdctl runs the command once it holds the lock, then unlocks and exits.
    let mut waiting = etcdctl(etcd)?;
    let waiting = waiting
        .args([
            "lock",
            key.as_str(),
            "--",
            "sh",
            "-c",
            "echo \"locked $ETCD_LOCK_KEY\"",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    expect_queue(&lock, &key, 2, "etcdctl's key queued behind distlock's").await?;
    let queue = etcdctl_queue(etcd, &key).await?;
    ensure!(
        queue.len() == 2 && queue.first() == Some(&format!("{key}/{}", ours.0)),
        "etcdctl lists the queue {queue:?}, not distlock's key {key}/{} first",
        ours.0
    );

    let released_at = Instant::now();
    lease.release().await?;
    let output = within(HANDOFF, "etcdctl's hand-off", waiting.wait_with_output()).await??;
    let took = released_at.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "etcdctl failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(
        queue
            .get(1)
            .is_some_and(|theirs| stdout.contains(&format!("locked {theirs}"))),
        "etcdctl's command printed {stdout:?}, not the key it queued ({queue:?})"
    );
    ensure!(
        took < HANDOFF,
        "etcdctl got the lock {took:?} after the release"
    );
    expect_queue(&lock, &key, 0, "every key deleted").await
}

/// etcd's own layout puts `a/b`'s keys inside `a`'s range; the adapter escapes
/// the slash, so holding `a/b` leaves `a` free for etcdctl and for distlock.
pub async fn a_slash_name_held_by_distlock_leaves_its_prefix_free(
    shared: Arc<Shared>,
) -> CaseResult {
    let etcd = shared.etcd().await?;
    let (lock, other) = (client(etcd).await?, client(etcd).await?);
    let parent = unique("parent")?;
    let child = LockKey::new(format!("{parent}/child"))?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let held = lock.acquire(&child, &opts).await?;
    let free = other.try_acquire(&parent, &opts).await?;
    let free = free.ok_or_else(|| CaseError::msg(format!("`{parent}` waited on `{child}`")))?;
    free.release().await?;
    let mut etcdctl = EtcdctlLock::hold(etcd, &parent).await?;
    etcdctl.unlock().await?;
    held.release().await?;
    Ok(())
}

/// Two distlock clients and two `etcdctl lock` loops take one lock in turn,
/// eight times each: never two holders at once, no lost update, revisions
/// rising in the order of the sections, and the lock handed across in both
/// directions.
pub async fn mutual_exclusion_under_contention(shared: Arc<Shared>) -> CaseResult {
    let etcd = shared.etcd().await?;
    let key = unique("contention")?;
    let sections = Arc::new(Sections::default());
    let inspector = Arc::new(client(etcd).await?);
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CONTENDERS {
        let lock = client(etcd).await?;
        tasks.spawn(distlock_rounds(
            lock,
            format!("#{n}"),
            key.clone(),
            sections.clone(),
        ));
        let (etcd, inspector, key, sections) = (
            shared.clone(),
            inspector.clone(),
            key.clone(),
            sections.clone(),
        );
        tasks.spawn(async move {
            let etcd = etcd.etcd().await?;
            etcdctl_rounds(etcd, format!("#{n}"), &inspector, &key, &sections).await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    sections.check(2 * CONTENDERS * ROUNDS)?;
    expect_queue(&*inspector, &key, 0, "every key deleted").await
}

/// etcdctl's rounds, one process each; each holding is checked against
/// distlock's view of the holder, whose create revision is the section's token.
async fn etcdctl_rounds(
    etcd: &EtcdServer,
    who: String,
    inspector: &EtcdLock,
    key: &LockKey,
    sections: &Sections,
) -> CaseResult {
    for _ in 0..ROUNDS {
        let mut etcdctl = EtcdctlLock::hold(etcd, key).await?;
        let seen = holder(inspector, key).await?;
        ensure!(
            format!("{key}/{}", seen.0) == etcdctl.key,
            "etcdctl {who} holds with {}; distlock sees {seen:?} as the holder",
            etcdctl.key
        );
        sections.run("etcdctl", &who, seen.1).await?;
        etcdctl.unlock().await?;
    }
    Ok(())
}

/// `etcdctl lock NAME` without a command: it prints its key once it holds the
/// lock and holds it until SIGTERM.
struct EtcdctlLock {
    child: EtcdctlChild,
    /// The key it holds the lock with, `NAME/<lease id>`.
    key: String,
}

impl EtcdctlLock {
    /// Starts it and waits until it holds the lock.
    async fn hold(etcd: &EtcdServer, key: &LockKey) -> Result<Self, CaseError> {
        let child = etcdctl(etcd)?
            .args(["lock", key.as_str()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut child = EtcdctlChild::new(child)?;
        let line = within(WAIT, "etcdctl lock printing its key", child.line()).await??;
        let printed = line.ok_or_else(|| CaseError::msg("etcdctl lock exited without a key"))?;
        ensure!(
            printed.starts_with(&format!("{key}/")),
            "etcdctl lock printed {printed:?}, not a key of {key}"
        );
        Ok(EtcdctlLock {
            child,
            key: printed,
        })
    }

    /// SIGTERM: etcdctl deletes its key, then exits; fails unless it exits cleanly.
    async fn unlock(&mut self) -> CaseResult {
        self.child.stop().await
    }
}

/// A long-running `etcdctl lock` or `etcdctl elect`, its stdout read line by line.
struct EtcdctlChild {
    child: Child,
    /// Kept open: etcdctl writes to it while it unlocks or resigns, and a
    /// closed pipe would kill it (SIGPIPE) before its key is deleted.
    lines: Lines<BufReader<ChildStdout>>,
}

impl EtcdctlChild {
    fn new(mut child: Child) -> Result<Self, CaseError> {
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| CaseError::msg("etcdctl's stdout was not piped"))?;
        Ok(EtcdctlChild {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Its next line of output; `None` once it exited.
    async fn line(&mut self) -> std::io::Result<Option<String>> {
        self.lines.next_line().await
    }

    /// SIGTERM: etcdctl deletes its key, then exits; fails unless it exits cleanly.
    async fn stop(&mut self) -> CaseResult {
        let pid = self
            .child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .ok_or_else(|| CaseError::msg("etcdctl exited before it was stopped"))?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        let status = within(HANDOFF, "etcdctl exiting on SIGTERM", self.child.wait()).await??;
        if !status.success() {
            let mut stderr = String::new();
            if let Some(mut pipe) = self.child.stderr.take() {
                pipe.read_to_string(&mut stderr).await?;
            }
            return Err(CaseError::msg(format!(
                "etcdctl exited with {status} on SIGTERM: {stderr}"
            )));
        }
        Ok(())
    }
}

impl Shared {
    /// The shared etcd member, started on first use.
    async fn etcd(&self) -> Result<&EtcdServer, CaseError> {
        self.etcd
            .get_or_try_init(distlock_tests::etcd::launch_server)
            .await
            .map_err(|e| CaseError::msg(format!("cannot start etcd: {e}")))
    }
}

/// An adapter client in etcdctl's namespace (the root).
async fn client(etcd: &EtcdServer) -> Result<EtcdLock, CaseError> {
    Ok(EtcdConfig::new([etcd.addr().to_string()])
        .namespace("")
        .connect()
        .await?)
}

/// `etcdctl` aimed at `etcd`.
fn etcdctl(etcd: &EtcdServer) -> Result<Command, CaseError> {
    Ok(Command::from(etcd.etcdctl()?))
}

/// etcdctl's own listing of `key`'s queue (its keys by create revision, the
/// holder first, as `etcdctl lock` orders them).
async fn etcdctl_queue(etcd: &EtcdServer, key: &LockKey) -> Result<Vec<String>, CaseError> {
    let prefix = format!("{key}/");
    let listing = etcd
        .etcdctl_run(&[
            "get",
            &prefix,
            "--prefix",
            "--keys-only",
            "--sort-by=CREATE",
            "--order=ASCEND",
        ])
        .await?;
    Ok(listing
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The values under `key`'s queue as etcdctl reads them, in create order (an
/// election's proposals, the leader's first).
async fn etcdctl_run_values(etcd: &EtcdServer, key: &LockKey) -> Result<Vec<String>, CaseError> {
    let prefix = format!("{key}/");
    let listing = etcd
        .etcdctl_run(&[
            "get",
            &prefix,
            "--prefix",
            "--print-value-only",
            "--sort-by=CREATE",
            "--order=ASCEND",
        ])
        .await?;
    Ok(listing
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}
