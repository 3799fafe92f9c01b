//! The history checker under faults: K clients run acquire / fenced-write /
//! release cycles on a few keys while faults are injected at random, every
//! operation is recorded with its invocation and completion on one monotonic
//! clock, and the checker reads the history back and reports:
//!
//! - overlapping holds of one key where both holders' fenced writes were
//!   admitted (required to be none where the backend promises strict fencing,
//!   measured elsewhere);
//! - tokens not strictly rising per key, in acquisition and in acceptance order;
//! - a stale write admitted by the fence;
//! - a lease whose lock was taken over without `lost()` firing by its local
//!   deadline.
//!
//! [`history`] is the event log (its file form in `text.rs`), [`mod@check`] the
//! checker, [`window`] the minimal slice of events that shows a violation,
//! [`mod@run`] the driver, [`workload`] one client's cycles, [`inject`] the
//! faults, [`holder`] the paused holder process, [`report`] the verdict and
//! the per-backend table. The workspace runs it as `just chaos` and re-checks a
//! written history with `just chaos-check FILE`.

pub mod check;
pub mod history;
pub mod holder;
pub mod inject;
mod leases;
pub mod report;
pub mod run;
mod text;
pub mod window;
pub mod workload;

pub use check::{Findings, Order, Overlap, Stats, Violation, check};
pub use history::{Event, History, Meta, Op, Outcome, Recorder, RenewalMode, Requirement};
pub use inject::{HarnessInjector, Injector};
pub use run::{Plan, Report, run};
pub use workload::Pace;

/// A fault the chaos run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// One server frozen with SIGSTOP, then SIGCONT.
    ServerPause,
    /// One server killed with SIGKILL, then started again on its data.
    ServerKill,
    /// A faulty client's traffic delayed.
    ProxyDelay,
    /// A faulty client's traffic dropped, connections left open.
    ProxyBlackhole,
    /// A faulty client's connections reset, new ones refused.
    ProxyReset,
    /// A faulty client's connections closed cleanly.
    ProxyClose,
    /// A lock holder in another process frozen past its ttl, then woken to
    /// write with its old token.
    HolderPause,
    /// A holder's traffic cut off for a while: with servers in containers
    /// (`DISTLOCK_LAUNCHER=docker`) one server's container is taken off its
    /// network (`docker network disconnect`), cutting every client and peer
    /// from it; natively one faulty client's proxy drops its bytes.
    NetworkCut,
    /// A cluster's leader cut off its peers (see [`crate::harness::Cluster`]).
    PartitionLeader,
    /// A follower, a minority of one, cut off its peers.
    PartitionMinority,
    /// The member a lock holder talks to cut off its peers, the holder on its
    /// side of the partition.
    PartitionHolder,
    /// One or two servers' wall clocks jumped forward (and left there), so
    /// that their keys expire early: servers launched with a movable clock
    /// only (`redlock::clock_jump`).
    ClockJump,
    /// Every server's wall clock stepped back an hour further, and left
    /// there: a collected name's counter reseeded afterwards must still give
    /// tokens above its earlier ones. Servers launched with a movable clock
    /// only (`<backend>::clock_step_back`).
    ClockStepBack,
    /// The primary killed and its asynchronous replica promoted, the clients'
    /// address moved to it, a new replica started: harnesses with a
    /// [`crate::harness::Failover`] only (`<backend>_replica::chaos`).
    Failover,
}

impl FaultKind {
    /// Every kind; an injector offers those its harness can apply (the
    /// partitions only to a cluster, clock jumps and steps only to servers
    /// with a movable clock).
    pub const ALL: [FaultKind; 14] = [
        FaultKind::ServerPause,
        FaultKind::ServerKill,
        FaultKind::ProxyDelay,
        FaultKind::ProxyBlackhole,
        FaultKind::ProxyReset,
        FaultKind::ProxyClose,
        FaultKind::HolderPause,
        FaultKind::NetworkCut,
        FaultKind::PartitionLeader,
        FaultKind::PartitionMinority,
        FaultKind::PartitionHolder,
        FaultKind::ClockJump,
        FaultKind::ClockStepBack,
        FaultKind::Failover,
    ];

    /// The name in histories and reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ServerPause => "server-pause",
            FaultKind::ServerKill => "server-kill",
            FaultKind::ProxyDelay => "proxy-delay",
            FaultKind::ProxyBlackhole => "proxy-blackhole",
            FaultKind::ProxyReset => "proxy-reset",
            FaultKind::ProxyClose => "proxy-close",
            FaultKind::HolderPause => "holder-pause",
            FaultKind::NetworkCut => "network-cut",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::PartitionMinority => "partition-minority",
            FaultKind::PartitionHolder => "partition-holder",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::ClockStepBack => "clock-step-back",
            FaultKind::Failover => "failover",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<FaultKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the fault freezes its target client, so that client cannot see
    /// `lost()` fire until it is woken.
    pub fn freezes_client(self) -> bool {
        self == FaultKind::HolderPause
    }
}

#[cfg(test)]
mod tests;
