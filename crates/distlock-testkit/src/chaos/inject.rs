//! Faults on a harness's servers and faulty clients.
//!
//! The driver asks an [`Injector`] for one fault at a time; each call applies
//! the fault, keeps it for the given length (the fault's own duration, not a
//! wait for anything) and undoes it, so the run never leaves a server frozen
//! or a proxy cut. [`HarnessInjector`] is the one every [`Harness`] gets from
//! its launched servers ([`Harness::launched_all`]), fault proxies and, for a
//! cluster, its [`Cluster`] (the partitions).

use super::FaultKind;
use crate::fault::{Fault, FaultControl};
use crate::harness::{Cluster, Harness};
use crate::servers::{Launched, MovableClock};
use async_trait::async_trait;
use distlock_core::BoxError;
use rand::Rng;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Applies faults to a backend under test.
#[async_trait]
pub trait Injector: Send + Sync {
    /// The kinds this injector can apply.
    fn kinds(&self) -> Vec<FaultKind>;

    /// Applies `kind` for `length`, then undoes it. `holders` are the clients
    /// holding a lease as it starts (`c0`…). Returns the target's name
    /// (`server`, `node2`, a client id) for the history.
    async fn inject(
        &self,
        kind: FaultKind,
        length: Duration,
        holders: &[String],
    ) -> Result<String, BoxError>;

    /// Undoes whatever an interrupted fault may have left: resumes every
    /// server, starts any that is down, clears every proxy.
    async fn heal(&self) -> Result<(), BoxError>;
}

/// Server faults through the harness's launched servers, proxy faults through
/// its faulty clients' controls.
pub struct HarnessInjector<'a> {
    harness: &'a dyn Harness,
    proxies: Vec<(String, Arc<dyn FaultControl>)>,
    menu: Vec<FaultKind>,
    /// The member a partition has cut off, until it heals.
    partitioned: Mutex<Option<usize>>,
}

impl std::fmt::Debug for HarnessInjector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessInjector")
            .field("harness", &self.harness.name())
            .field("proxies", &self.proxies.len())
            .field("menu", &self.menu)
            .finish()
    }
}

impl<'a> HarnessInjector<'a> {
    /// An injector for the kinds of `menu` that `harness` and `proxies` (each
    /// a faulty client's id and control) can apply.
    pub fn new(
        harness: &'a dyn Harness,
        proxies: Vec<(String, Arc<dyn FaultControl>)>,
        menu: &[FaultKind],
    ) -> Self {
        HarnessInjector {
            harness,
            proxies,
            menu: menu.to_vec(),
            partitioned: Mutex::new(None),
        }
    }

    fn servers(&self) -> Vec<(String, &'a dyn Launched)> {
        let servers = self.harness.launched_all();
        let many = servers.len() > 1;
        servers
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    if many {
                        format!("node{i}")
                    } else {
                        "server".into()
                    },
                    s,
                )
            })
            .collect()
    }

    fn pick_server(&self) -> Result<(String, &'a dyn Launched), BoxError> {
        let mut servers = self.servers();
        if servers.is_empty() {
            return Err("the harness launched no server".into());
        }
        let index = rand::rng().random_range(0..servers.len());
        Ok(servers.swap_remove(index))
    }

    fn pick_proxy(&self) -> Result<(String, Arc<dyn FaultControl>), BoxError> {
        if self.proxies.is_empty() {
            return Err("no faulty client".into());
        }
        let index = rand::rng().random_range(0..self.proxies.len());
        let (name, control) = &self.proxies[index];
        Ok((name.clone(), control.clone()))
    }

    /// The launched servers that run in containers (none natively).
    fn contained(&self) -> Vec<(String, &'a dyn Launched)> {
        self.servers()
            .into_iter()
            .filter(|(_, server)| server.process().container().is_some())
            .collect()
    }

    /// Cuts one containerised server off its network for `length` (every
    /// holder on it loses its traffic; the process keeps running and keeps its
    /// connections, which resume or time out once it is back), or natively one
    /// faulty client's proxy, which drops its bytes as a cut link would.
    async fn network_cut(&self, length: Duration) -> Result<String, BoxError> {
        let mut contained = self.contained();
        if contained.is_empty() {
            return self.proxy_fault(Fault::Blackhole, length).await;
        }
        let index = rand::rng().random_range(0..contained.len());
        let (name, server) = contained.swap_remove(index);
        server.process().disconnect()?;
        tokio::time::sleep(length).await;
        server.process().reconnect()?;
        Ok(name)
    }

    /// Cuts one member off its peers for `length`: the leader, a follower, or
    /// the member one of `holders` talks to (any member when none holds).
    async fn partition(
        &self,
        kind: FaultKind,
        length: Duration,
        holders: &[String],
    ) -> Result<String, BoxError> {
        let cluster = self.harness.cluster().ok_or("not a cluster")?;
        let size = self.servers().len();
        let member = match kind {
            FaultKind::PartitionLeader => leader(cluster).await.ok_or("no leader to cut off")?,
            FaultKind::PartitionMinority => {
                let leader = leader(cluster).await;
                let followers: Vec<usize> = (0..size).filter(|m| Some(*m) != leader).collect();
                *pick(&followers).ok_or("no follower to cut off")?
            }
            _ => {
                let members: Vec<usize> = holders
                    .iter()
                    .filter_map(|client| client.strip_prefix('c')?.parse().ok())
                    .filter_map(|n| cluster.member_of_client(n))
                    .collect();
                let any: Vec<usize> = (0..size).collect();
                *pick(&members)
                    .or_else(|| pick(&any))
                    .ok_or("no member to cut off")?
            }
        };
        *self.cut() = Some(member);
        cluster.partition(member)?;
        tokio::time::sleep(length).await;
        heal_partition(cluster, &mut self.cut())?;
        Ok(format!("node{member}"))
    }

    /// Jumps the wall clocks of one or two servers (at random, never all of
    /// them) forward by `length`, for good: their keys with less than that to
    /// live expire at once. The target names the nodes and the jump,
    /// `node0,node2:+750ms`.
    fn clock_jump(&self, length: Duration) -> Result<String, BoxError> {
        let mut clocked = self.clocked();
        let most = clocked.len().saturating_sub(1).clamp(1, 2);
        let count = rand::rng().random_range(1..=most);
        let mut jumped = Vec::new();
        for _ in 0..count.min(clocked.len()) {
            let (name, clock) = clocked.swap_remove(rand::rng().random_range(0..clocked.len()));
            clock.jump_ahead(length)?;
            jumped.push(name);
        }
        if jumped.is_empty() {
            return Err("no server has a movable clock".into());
        }
        jumped.sort();
        Ok(format!("{}:+{}ms", jumped.join(","), length.as_millis()))
    }

    /// Steps the wall clock of every server with a movable clock back by
    /// [`STEP_BACK`] further, for good. The target names the servers and the
    /// step, `server:-3600000ms`.
    fn clock_step_back(&self) -> Result<String, BoxError> {
        let clocked = self.clocked();
        if clocked.is_empty() {
            return Err("no server has a movable clock".into());
        }
        for (_, clock) in &clocked {
            clock.step_back(STEP_BACK)?;
        }
        let names: Vec<String> = clocked.into_iter().map(|(name, _)| name).collect();
        Ok(format!("{}:-{}ms", names.join(","), STEP_BACK.as_millis()))
    }

    /// The servers launched with a movable clock, and their clocks.
    fn clocked(&self) -> Vec<(String, &'a MovableClock)> {
        self.servers()
            .into_iter()
            .filter_map(|(name, server)| Some((name, server.clock()?)))
            .collect()
    }

    fn cut(&self) -> std::sync::MutexGuard<'_, Option<usize>> {
        self.partitioned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn proxy_fault(&self, fault: Fault, length: Duration) -> Result<String, BoxError> {
        let (name, control) = self.pick_proxy()?;
        control.set_fault(fault).await;
        tokio::time::sleep(length).await;
        control.set_fault(Fault::None).await;
        Ok(name)
    }
}

#[async_trait]
impl Injector for HarnessInjector<'_> {
    fn kinds(&self) -> Vec<FaultKind> {
        let has_servers = !self.harness.launched_all().is_empty();
        let has_proxies = !self.proxies.is_empty();
        self.menu
            .iter()
            .copied()
            .filter(|kind| match kind {
                FaultKind::ServerPause | FaultKind::ServerKill => has_servers,
                FaultKind::HolderPause => false,
                FaultKind::NetworkCut => has_proxies || !self.contained().is_empty(),
                FaultKind::PartitionLeader
                | FaultKind::PartitionMinority
                | FaultKind::PartitionHolder => self.harness.cluster().is_some(),
                FaultKind::ClockJump | FaultKind::ClockStepBack => !self.clocked().is_empty(),
                FaultKind::Failover => self.harness.failover().is_some(),
                _ => has_proxies,
            })
            .collect()
    }

    async fn inject(
        &self,
        kind: FaultKind,
        length: Duration,
        holders: &[String],
    ) -> Result<String, BoxError> {
        match kind {
            FaultKind::ServerPause => {
                let (name, server) = self.pick_server()?;
                server.process().pause()?;
                tokio::time::sleep(length).await;
                server.process().resume()?;
                Ok(name)
            }
            FaultKind::ServerKill => {
                let (name, server) = self.pick_server()?;
                server.process().kill();
                // Down from no time at all (a supervisor restarts it at once,
                // while holders still believe) to half the fault's length.
                let down = length.mul_f64(rand::rng().random_range(0.0..0.5));
                tokio::time::sleep(down).await;
                server.restart().await?;
                Ok(name)
            }
            FaultKind::ProxyDelay => {
                // Long enough to matter against the ttl, short enough that most
                // replies still leave validity.
                let delay = length / 8;
                self.proxy_fault(Fault::Delay(delay), length).await
            }
            FaultKind::ProxyBlackhole => self.proxy_fault(Fault::Blackhole, length).await,
            FaultKind::ProxyReset => self.proxy_fault(Fault::Reset, length).await,
            FaultKind::ProxyClose => self.proxy_fault(Fault::Close, length).await,
            FaultKind::HolderPause => Err("holder pauses are run by the driver".into()),
            FaultKind::NetworkCut => self.network_cut(length).await,
            FaultKind::PartitionLeader
            | FaultKind::PartitionMinority
            | FaultKind::PartitionHolder => self.partition(kind, length, holders).await,
            FaultKind::ClockJump => {
                let target = self.clock_jump(length)?;
                // The jump is instant and stays; the run goes on as after any fault.
                tokio::time::sleep(length).await;
                Ok(target)
            }
            FaultKind::ClockStepBack => {
                let target = self.clock_step_back()?;
                tokio::time::sleep(length).await;
                Ok(target)
            }
            FaultKind::Failover => {
                let failover = self
                    .harness
                    .failover()
                    .ok_or("no replica to fail over to")?;
                failover.fail_over().await
            }
        }
    }

    async fn heal(&self) -> Result<(), BoxError> {
        if let Some(cluster) = self.harness.cluster() {
            heal_partition(cluster, &mut self.cut())?;
        }
        for (_, server) in self.servers() {
            if server.process().is_running() {
                // SIGCONT to a running process is harmless.
                server.process().resume()?;
            } else {
                server.restart().await?;
            }
        }
        for (_, control) in &self.proxies {
            control.set_fault(Fault::None).await;
        }
        Ok(())
    }
}

/// How far one `clock-step-back` moves the servers' clocks: an hour, far
/// beyond any ttl and `state_ttl`, as a clock reset by a bad time source is.
const STEP_BACK: Duration = Duration::from_secs(3600);

/// How long a partition waits for a leader: the fault before may have
/// started an election (a leader paused, killed or cut off and back).
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// The cluster's leader, once it has one, waiting up to [`LEADER_WAIT`].
async fn leader(cluster: &dyn Cluster) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + LEADER_WAIT;
    loop {
        let leader = cluster.leader().await;
        if leader.is_some() || tokio::time::Instant::now() >= deadline {
            return leader;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Ends the partition `cut` names, if any.
fn heal_partition(cluster: &dyn Cluster, cut: &mut Option<usize>) -> Result<(), BoxError> {
    match cut.take() {
        Some(member) => cluster.heal(member),
        None => Ok(()),
    }
}

/// One of `items` at random.
fn pick<T>(items: &[T]) -> Option<&T> {
    (!items.is_empty()).then(|| &items[rand::rng().random_range(0..items.len())])
}
