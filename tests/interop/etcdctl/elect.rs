//! etcd's own `etcdctl elect` (the Go `concurrency.Election`) and the etcd
//! adapter's election on one name, both ways: each waits while the other
//! leads, sees the other's proposal as the leader, and takes over right after
//! the other resigns, with a term above the other's.

use super::{EtcdctlChild, client, etcdctl, etcdctl_run_values};
use crate::inspect::expect_queue;
use crate::sections::{HANDOFF, WAIT};
use crate::{Shared, unique};
use distlock_core::{AcquireOptions, DistributedLock, Held, LockKey, SingleLease, Wait};
use distlock_testkit::cases::{CaseError, CaseResult, within};
use distlock_testkit::ensure;
use distlock_testkit::servers::EtcdServer;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `etcdctl elect NAME PROPOSAL` leads: distlock reads its proposal and key as
/// the leader, campaigns behind it, and is elected right after etcdctl resigns
/// (on SIGTERM), with its own proposal on its key and a higher term.
pub async fn etcdctl_elect_leads_distlock_follows(shared: Arc<Shared>) -> CaseResult {
    let etcd = shared.etcd().await?;
    let lock = client(etcd).await?;
    let election = lock
        .election()
        .ok_or_else(|| CaseError::msg("the etcd adapter offers no election"))?;
    let name = unique("elect-etcdctl-first")?;
    let mut theirs = Candidate::campaign(etcd, &name, "their-proposal").await?;
    theirs.elected().await?;
    let leader = election
        .leader(&name)
        .await?
        .ok_or_else(|| CaseError::msg(format!("distlock sees no leader of {name}")))?;
    ensure!(
        leader.owner == "their-proposal",
        "distlock sees {:?} as the leader's proposal",
        leader.owner
    );
    let their_term = leader
        .token
        .ok_or_else(|| CaseError::msg("the leader has no term"))?;

    let campaign = tokio::spawn({
        let (election, name) = (election.clone(), name.clone());
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait(Wait::For(WAIT));
        async move {
            let won = election.campaign(&name, "our-proposal", &opts).await;
            (Instant::now(), won)
        }
    });
    expect_queue(&lock, &name, 2, "distlock's key queued behind etcdctl's").await?;
    ensure!(
        !campaign.is_finished(),
        "distlock was elected while etcdctl leads"
    );

    let resigned_at = Instant::now();
    theirs.stop().await?;
    let (elected_at, leadership) = within(HANDOFF, "distlock elected", campaign).await??;
    let leadership = leadership?;
    ensure!(
        elected_at - resigned_at < HANDOFF,
        "distlock was elected {:?} after etcdctl resigned",
        elected_at - resigned_at
    );
    ensure!(
        leadership.token() > their_term,
        "distlock's term {} is not above etcdctl's {their_term}",
        leadership.token()
    );
    let values = etcdctl_run_values(etcd, &name).await?;
    ensure!(
        values == ["our-proposal"],
        "etcdctl reads the election's values {values:?}, not distlock's proposal alone"
    );
    leadership.release().await?;
    expect_queue(&lock, &name, 0, "every key deleted").await
}

/// distlock leads: `etcdctl elect` queues behind it (its proposal on the
/// second key), prints nothing while distlock leads, is elected right after
/// distlock resigns, and distlock then reads etcdctl's proposal as the leader.
pub async fn distlock_leads_etcdctl_elect_follows(shared: Arc<Shared>) -> CaseResult {
    let etcd = shared.etcd().await?;
    let lock = client(etcd).await?;
    let election = lock
        .election()
        .ok_or_else(|| CaseError::msg("the etcd adapter offers no election"))?;
    let name = unique("elect-distlock-first")?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let leadership = election.campaign(&name, "our-proposal", &opts).await?;
    let mut theirs = Candidate::campaign(etcd, &name, "their-proposal").await?;
    expect_queue(&lock, &name, 2, "etcdctl's key queued behind distlock's").await?;
    let values = etcdctl_run_values(etcd, &name).await?;
    ensure!(
        values == ["our-proposal", "their-proposal"],
        "etcdctl reads the election's values {values:?} in create order"
    );
    ensure!(
        tokio::time::timeout(Duration::from_millis(500), theirs.elected())
            .await
            .is_err(),
        "etcdctl was elected while distlock leads"
    );

    let resigned_at = Instant::now();
    let our_term = leadership.token();
    leadership.release().await?;
    theirs.elected().await?;
    ensure!(
        resigned_at.elapsed() < HANDOFF,
        "etcdctl was elected {:?} after distlock resigned",
        resigned_at.elapsed()
    );
    let leader = election
        .leader(&name)
        .await?
        .ok_or_else(|| CaseError::msg(format!("distlock sees no leader of {name}")))?;
    ensure!(
        leader.owner == "their-proposal" && leader.token > Some(our_term),
        "distlock sees {leader:?} as the leader, not etcdctl with a term above {our_term}"
    );
    theirs.stop().await?;
    expect_queue(&lock, &name, 0, "every key deleted").await
}

/// A running `etcdctl elect NAME PROPOSAL`: it prints its key and proposal
/// once elected, and resigns on SIGTERM.
struct Candidate {
    child: EtcdctlChild,
    name: LockKey,
}

impl Candidate {
    async fn campaign(
        etcd: &EtcdServer,
        name: &LockKey,
        proposal: &str,
    ) -> Result<Self, CaseError> {
        let child = etcdctl(etcd)?
            .args(["elect", name.as_str(), proposal])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Candidate {
            child: EtcdctlChild::new(child)?,
            name: name.clone(),
        })
    }

    /// Waits until it prints its key: it leads.
    async fn elected(&mut self) -> CaseResult {
        let line = within(WAIT, "etcdctl elect printing its key", self.child.line()).await??;
        let printed = line.ok_or_else(|| CaseError::msg("etcdctl elect exited unelected"))?;
        ensure!(
            printed.starts_with(&format!("{}/", self.name)),
            "etcdctl elect printed {printed:?}, not a key of {}",
            self.name
        );
        Ok(())
    }

    /// SIGTERM: it resigns (deletes its key) and exits cleanly.
    async fn stop(&mut self) -> CaseResult {
        self.child.stop().await
    }
}
