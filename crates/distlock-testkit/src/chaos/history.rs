//! The event log of a chaos run: every operation with its invocation and
//! completion on one monotonic clock. Its file form is in `text.rs`.

use super::FaultKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Whether the lease renews itself or the workload renews it by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalMode {
    /// `Renewal::Auto`: the lease's watchdog renews; the local deadline is not
    /// observable from outside, only bounded.
    Auto,
    /// `Renewal::Manual`: every renewal is a `renew` event, so the local
    /// deadline is known exactly from the history.
    Manual,
}

/// What an event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// An acquire with this ttl.
    Acquire {
        /// The lease's ttl.
        ttl: Duration,
        /// How it is renewed.
        renewal: RenewalMode,
    },
    /// A fenced write with the lease's token. `checked`: the writer saw
    /// `is_held()` true at or after `invoked` (a woken paused holder does not
    /// check).
    Write {
        /// Whether the writer confirmed that it held the lease.
        checked: bool,
    },
    /// A manual renewal.
    Renew,
    /// A release.
    Release,
    /// `lost()` fired; invoked and completed are when it was seen.
    Lost,
    /// A fault was applied at `invoked` and undone at `completed`; the
    /// event's client names its target.
    Fault(FaultKind),
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Ok,
    /// A fenced write was admitted as the resource's `n`-th accepted write:
    /// the store's own acceptance order.
    Admitted(u64),
    /// A fenced write was refused: the store had admitted `highest`.
    Stale(u64),
    /// The wait ended without the lock.
    NotAcquired,
    /// The operation found the lease lost, for this reason.
    Lost(String),
    /// Any other error.
    Error(String),
}

/// One operation of a chaos run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client (`c0`…), holder process (`h0`…) or fault target (`server`,
    /// `node2`, `c5`).
    pub client: String,
    /// The lease the event belongs to; 0 for none.
    pub lease: u64,
    /// The lock key; empty for faults.
    pub key: String,
    /// What was done.
    pub op: Op,
    /// When it started, in ns since the run started.
    pub invoked: u64,
    /// When it ended.
    pub completed: u64,
    /// The lease's token.
    pub token: Option<u64>,
    /// The lease's local deadline as sampled at `completed`.
    pub deadline: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

/// Whether a property must hold on this backend or is only measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Any violation fails the run.
    Required,
    /// Violations are counted and printed (the backend does not promise it
    /// under these faults).
    Measured,
}

/// What a run expects, stored with its history so a re-check judges alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The trial, such as `redis::chaos`.
    pub trial: String,
    /// Overlapping holds with both holders' writes admitted.
    pub exclusion: Requirement,
    /// Tokens strictly rising per key.
    pub token_order: Requirement,
    /// How late `lost()` may be seen after the local deadline: the scheduling
    /// of the task that records it, not a property of the lock.
    pub lost_slack: Duration,
}

/// A whole run: its settings and events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// The settings.
    pub meta: Meta,
    /// The events, in the order they were recorded.
    pub events: Vec<Event>,
}

/// Collects events from many tasks against one clock.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    events: Mutex<Vec<Event>>,
    leases: AtomicU64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: Instant::now(),
            events: Mutex::default(),
            leases: AtomicU64::new(0),
        }
    }
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        Self::default()
    }

    /// Now, in ns since the start.
    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// `instant` in ns since the start (0 before it).
    pub fn at(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A fresh lease id (never 0).
    pub fn new_lease(&self) -> u64 {
        self.leases.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The events of one fresh lease of `client` on `key`, each completed when
    /// it is built: the acquire, writes, release and loss all share the lease id.
    pub fn lease_events<'a>(
        &'a self,
        client: &'a str,
        key: &'a impl std::fmt::Display,
    ) -> impl Fn(Op, u64, Option<u64>, Option<u64>, Outcome) -> Event + 'a {
        let lease = self.new_lease();
        move |op, invoked, token, deadline, outcome| Event {
            client: client.into(),
            lease,
            key: key.to_string(),
            op,
            invoked,
            completed: self.now(),
            token,
            deadline,
            outcome,
        }
    }

    /// Adds one event.
    pub fn record(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// The clients holding a lease now: acquired, and neither released nor
    /// lost yet.
    pub fn holders(&self) -> Vec<String> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let ended: std::collections::HashSet<u64> = events
            .iter()
            .filter(|e| matches!(e.op, Op::Release | Op::Lost))
            .map(|e| e.lease)
            .collect();
        let mut holders: Vec<String> = events
            .iter()
            .filter(|e| matches!(e.op, Op::Acquire { .. }) && e.outcome == Outcome::Ok)
            .filter(|e| !ended.contains(&e.lease))
            .map(|e| e.client.clone())
            .collect();
        holders.sort();
        holders.dedup();
        holders
    }

    /// The history so far, events sorted by invocation.
    pub fn history(&self, meta: Meta) -> History {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        events.sort_by_key(|e| (e.invoked, e.completed));
        History { meta, events }
    }
}
