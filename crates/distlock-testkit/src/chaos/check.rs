//! The checker: reads a [`History`] and returns typed violations.
//!
//! - **Overlap**: two leases of one key whose *admitted spans* intersect. A
//!   lease's admitted span runs from its acquire's completion to the latest
//!   checked write the fence admitted (the writer saw `is_held()` true at that
//!   instant or later). Both ends are ones the holder certainly believed in,
//!   so an intersection is a real double holder whose writes both landed, and
//!   its length is a lower bound of the overlap window.
//! - **Token order**: a lease whose acquire started after another's completed
//!   was granted later and must carry a higher token (acquisition order); and
//!   along the fence's own acceptance order, two different leases never share
//!   a token.
//! - **Stale admitted**: the fence admitted a token lower than one it had
//!   admitted before.
//! - **Missed lost**: another client acquired the key while a lease had neither
//!   been released nor seen `lost()`, so the server had dropped it; `lost()`
//!   (or the release) must then come by the lease's local deadline. That
//!   deadline is exact for manually renewed leases (every renewal is an event)
//!   and bounded for self-renewing ones: a renewal that succeeded was sent
//!   before the takeover, so the deadline is at most takeover + ttl − drift. A
//!   holder frozen by a pause fault gets the pause added: it could not run.

use super::history::{History, Op, Outcome, RenewalMode, Requirement};
use super::leases::{Lease, leases};
use std::collections::BTreeMap;
use std::time::Duration;

/// Which order a token was found out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The later acquire got a token not above an earlier one's.
    Acquisition,
    /// Two leases' writes were admitted with the same token.
    Acceptance,
}

/// Two leases' admitted spans intersecting over `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The key.
    pub key: String,
    /// The lease with the lower token.
    pub first: u64,
    /// The other lease.
    pub second: u64,
    /// Start of the common part.
    pub from: u64,
    /// Its end.
    pub to: u64,
}

/// One broken property. Leases are named by their id, events by their index in
/// [`History::events`]; times are ns since the run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two leases' admitted spans intersect.
    Overlap(Overlap),
    /// Tokens did not strictly rise.
    TokenNotRising {
        /// The key.
        key: String,
        /// Along which order.
        order: Order,
        /// The earlier event (an acquire, or an admitted write).
        earlier: usize,
        /// The later one.
        later: usize,
    },
    /// The fence admitted `write` although it had admitted `highest_write`'s
    /// higher token before.
    StaleAdmitted {
        /// The key.
        key: String,
        /// The admitted stale write.
        write: usize,
        /// The earlier write with the higher token.
        highest_write: usize,
    },
    /// `lease` was taken over at `taken_at` (by `taken_by`'s acquire) and did
    /// not notice by `deadline` (+ the slack).
    MissedLost {
        /// The key.
        key: String,
        /// The lease that missed it.
        lease: u64,
        /// The acquire event that took the key.
        taken_by: usize,
        /// When that acquire completed.
        taken_at: u64,
        /// The lease's local deadline (bound), pauses added.
        deadline: u64,
        /// When the holder noticed (lost or release), if ever.
        noticed: Option<u64>,
    },
}

impl Violation {
    /// A short name: `overlap`, `token-order`, `stale-admitted`, `missed-lost`.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Overlap(_) => "overlap",
            Violation::TokenNotRising { .. } => "token-order",
            Violation::StaleAdmitted { .. } => "stale-admitted",
            Violation::MissedLost { .. } => "missed-lost",
        }
    }

    /// Whether this run requires the property (else it is only measured).
    /// The fence and the lost signal are required everywhere.
    pub fn requirement(&self, history: &History) -> Requirement {
        match self {
            Violation::Overlap(_) => history.meta.exclusion,
            Violation::TokenNotRising { .. } => history.meta.token_order,
            _ => Requirement::Required,
        }
    }
}

/// Counts over the history, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Acquires that got the lock.
    pub acquired: usize,
    /// Acquires whose wait ended without it.
    pub not_acquired: usize,
    /// Acquires that failed otherwise.
    pub acquire_errors: usize,
    /// Fenced writes admitted.
    pub admitted: usize,
    /// Fenced writes refused as stale.
    pub refused: usize,
    /// `lost()` signals seen.
    pub lost: usize,
    /// Leases that still believed they held their key (a checked write, the
    /// fence admitting it or not) after a later lease of the key was granted:
    /// two holders at once, whatever the fence then made of their writes.
    pub superseded: usize,
    /// Faults by kind.
    pub faults: BTreeMap<&'static str, usize>,
    /// The longest overlap found.
    pub max_overlap: Duration,
}

/// Everything the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Every violation, required or measured.
    pub violations: Vec<Violation>,
    /// The counts.
    pub stats: Stats,
}

impl Findings {
    /// The violations of required properties: any fails the run.
    pub fn failures<'a>(&'a self, history: &'a History) -> impl Iterator<Item = &'a Violation> {
        self.violations
            .iter()
            .filter(|v| v.requirement(history) == Requirement::Required)
    }

    /// How many violations of `kind`.
    pub fn count(&self, kind: &str) -> usize {
        self.violations.iter().filter(|v| v.kind() == kind).count()
    }
}

/// Checks every property over `history`.
pub fn check(history: &History) -> Findings {
    let by_key = leases(history);
    let mut violations = Vec::new();
    for (key, leases) in &by_key {
        overlaps(key, leases, &mut violations);
        acquisition_order(key, leases, &mut violations);
        missed_lost(history, key, leases, &mut violations);
    }
    acceptance_order(history, &mut violations);
    let mut stats = stats(history, &violations);
    stats.superseded = by_key.values().map(|l| superseded(l)).sum();
    Findings { violations, stats }
}

fn overlaps(key: &str, leases: &[Lease<'_>], out: &mut Vec<Violation>) {
    let spans: Vec<(u64, u64, &Lease<'_>)> = leases
        .iter()
        .filter_map(|l| l.last_admitted.map(|end| (l.event.completed, end, l)))
        .collect();
    for (i, (start_a, end_a, a)) in spans.iter().enumerate() {
        // Sorted by start: once a span starts after `a` ends, none later overlaps it.
        for (start_b, end_b, b) in spans[i + 1..].iter().take_while(|(s, ..)| s < end_a) {
            let (from, to) = ((*start_a).max(*start_b), (*end_a).min(*end_b));
            if from < to {
                let (first, second) = if a.token <= b.token { (a, b) } else { (b, a) };
                out.push(Violation::Overlap(Overlap {
                    key: key.into(),
                    first: first.id,
                    second: second.id,
                    from,
                    to,
                }));
            }
        }
    }
}

/// The leases of one key that wrote, believing, after a lease with a higher
/// token completed its acquire.
fn superseded(leases: &[Lease<'_>]) -> usize {
    leases
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            a.last_believed.is_some_and(|believed| {
                leases[i + 1..]
                    .iter()
                    .any(|b| b.token > a.token && b.event.completed < believed)
            })
        })
        .count()
}

fn acquisition_order(key: &str, leases: &[Lease<'_>], out: &mut Vec<Violation>) {
    // `leases` is in completion order; walk the later ones in invocation order and
    // keep the highest token of every lease that completed before each started.
    let mut by_invocation: Vec<&Lease<'_>> = leases.iter().collect();
    by_invocation.sort_by_key(|l| (l.event.invoked, l.id));
    let (mut done, mut highest): (usize, Option<&Lease<'_>>) = (0, None);
    for later in by_invocation {
        while done < leases.len() && leases[done].event.completed < later.event.invoked {
            if highest.is_none_or(|h| leases[done].token > h.token) {
                highest = Some(&leases[done]);
            }
            done += 1;
        }
        if let Some(earlier) = highest.filter(|h| later.token <= h.token) {
            out.push(Violation::TokenNotRising {
                key: key.into(),
                order: Order::Acquisition,
                earlier: earlier.acquire,
                later: later.acquire,
            });
        }
    }
}

fn acceptance_order(history: &History, out: &mut Vec<Violation>) {
    let mut writes: BTreeMap<&str, Vec<(u64, usize)>> = BTreeMap::new();
    for (index, e) in history.events.iter().enumerate() {
        if let (Op::Write { .. }, Outcome::Admitted(n)) = (&e.op, &e.outcome) {
            writes.entry(e.key.as_str()).or_default().push((*n, index));
        }
    }
    for (key, mut admitted) in writes {
        admitted.sort_unstable();
        let mut highest: Option<usize> = None;
        for (_, index) in admitted {
            let e = &history.events[index];
            if let Some(h) = highest {
                let top = &history.events[h];
                if e.token < top.token {
                    out.push(Violation::StaleAdmitted {
                        key: key.into(),
                        write: index,
                        highest_write: h,
                    });
                    continue;
                }
                if e.token == top.token && e.lease != top.lease {
                    out.push(Violation::TokenNotRising {
                        key: key.into(),
                        order: Order::Acceptance,
                        earlier: h,
                        later: index,
                    });
                }
            }
            highest = Some(index);
        }
    }
}

fn missed_lost(history: &History, key: &str, leases: &[Lease<'_>], out: &mut Vec<Violation>) {
    let slack = u64::try_from(history.meta.lost_slack.as_nanos()).unwrap_or(u64::MAX);
    let end_of_run = history
        .events
        .iter()
        .map(|e| e.completed)
        .max()
        .unwrap_or(0);
    for (i, a) in leases.iter().enumerate() {
        // The first later holder: completed after `a`, with a higher token.
        let Some(b) = leases[i + 1..].iter().find(|b| b.token > a.token) else {
            continue;
        };
        let taken_at = b.event.completed;
        if a.ended.is_some_and(|end| end <= taken_at) {
            continue;
        }
        let deadline = paused(history, &a.event.client, deadline_bound(a, taken_at));
        let late = match a.ended {
            Some(noticed) => noticed > deadline.saturating_add(slack),
            // Still open when the run ended: late only if the run outlived the deadline.
            None => end_of_run > deadline.saturating_add(slack),
        };
        if late {
            out.push(Violation::MissedLost {
                key: key.into(),
                lease: a.id,
                taken_by: b.acquire,
                taken_at,
                deadline,
                noticed: a.ended,
            });
        }
    }
}

/// The latest local deadline `lease` can have had, given that its lock was
/// gone by `taken_at`.
fn deadline_bound(lease: &Lease<'_>, taken_at: u64) -> u64 {
    match lease.renewal {
        RenewalMode::Manual => lease
            .samples
            .iter()
            .filter(|(invoked, _)| *invoked < taken_at)
            .map(|(_, deadline)| *deadline)
            .max()
            .unwrap_or(lease.event.completed),
        RenewalMode::Auto => {
            let validity = lease
                .ttl
                .saturating_sub(distlock_core::adapter::clock_drift(lease.ttl));
            taken_at.saturating_add(u64::try_from(validity.as_nanos()).unwrap_or(u64::MAX))
        }
    }
}

/// `deadline` moved by every pause of `client` that began before it.
fn paused(history: &History, client: &str, deadline: u64) -> u64 {
    let mut moved = deadline;
    for e in &history.events {
        if matches!(e.op, Op::Fault(kind) if kind.freezes_client())
            && e.client == client
            && e.invoked < moved
        {
            moved = moved.saturating_add(e.completed.saturating_sub(e.invoked));
        }
    }
    moved
}

fn stats(history: &History, violations: &[Violation]) -> Stats {
    let mut s = Stats::default();
    for e in &history.events {
        match (&e.op, &e.outcome) {
            (Op::Acquire { .. }, Outcome::Ok) => s.acquired += 1,
            (Op::Acquire { .. }, Outcome::NotAcquired) => s.not_acquired += 1,
            (Op::Acquire { .. }, _) => s.acquire_errors += 1,
            (Op::Write { .. }, Outcome::Admitted(_)) => s.admitted += 1,
            (Op::Write { .. }, Outcome::Stale(_)) => s.refused += 1,
            (Op::Lost, _) => s.lost += 1,
            (Op::Fault(kind), _) => *s.faults.entry(kind.name()).or_default() += 1,
            _ => {}
        }
    }
    s.max_overlap = violations
        .iter()
        .filter_map(|v| match v {
            Violation::Overlap(o) => Some(Duration::from_nanos(o.to - o.from)),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    s
}
