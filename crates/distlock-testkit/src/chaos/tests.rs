//! The checker fed hand-made histories: each violation is found, reported with
//! its minimal window, and a history survives the trip through its file. The
//! missed-lost cases are in `tests/lost.rs`, the file's trip in `tests/file.rs`,
//! histories recorded on a cluster in `tests/cluster.rs`, one recorded
//! around a Redlock node's clock jump in `tests/clock.rs`, and ones around a
//! Sentinel failover and a failover to a lagging MariaDB replica in
//! `tests/failover.rs`.

use super::FaultKind;
use super::check::{Order, Overlap, Violation, check};
use super::history::{Event, History, Meta, Op, Outcome, RenewalMode, Requirement};
use super::report::verdict;
use super::window::{render, window};
use std::time::Duration;

mod clock;
mod cluster;
mod failover;
mod file;
mod lost;

const MS: u64 = 1_000_000;

fn meta(exclusion: Requirement) -> Meta {
    Meta {
        trial: "hand::made".into(),
        exclusion,
        token_order: Requirement::Required,
        lost_slack: Duration::from_millis(250),
    }
}

fn event(client: &str, lease: u64, key: &str, op: Op, from: u64, to: u64) -> Event {
    Event {
        client: client.into(),
        lease,
        key: key.into(),
        op,
        invoked: from * MS,
        completed: to * MS,
        token: None,
        deadline: None,
        outcome: Outcome::Ok,
    }
}

/// An acquire by `client` of `key` as lease `lease`, ttl 1 s.
fn acquire(
    client: &str,
    lease: u64,
    key: &str,
    token: u64,
    from: u64,
    to: u64,
    mode: RenewalMode,
) -> Event {
    let op = Op::Acquire {
        ttl: Duration::from_secs(1),
        renewal: mode,
    };
    Event {
        token: Some(token),
        deadline: Some((to + 990) * MS),
        ..event(client, lease, key, op, from, to)
    }
}

fn write(client: &str, lease: u64, key: &str, token: u64, at: u64, outcome: Outcome) -> Event {
    Event {
        token: Some(token),
        outcome,
        ..event(client, lease, key, Op::Write { checked: true }, at, at)
    }
}

fn release(client: &str, lease: u64, key: &str, token: u64, at: u64) -> Event {
    Event {
        token: Some(token),
        ..event(client, lease, key, Op::Release, at, at + 1)
    }
}

fn lost(client: &str, lease: u64, key: &str, at: u64) -> Event {
    Event {
        outcome: Outcome::Lost("Expired".into()),
        ..event(client, lease, key, Op::Lost, at, at)
    }
}

/// Lease `lease` of client `c<lease - 1>` on `k`: acquired with `token` over
/// `acquired`, its `writes` (at, outcome), and its release at `released`.
fn hold(
    lease: u64,
    token: u64,
    acquired: (u64, u64),
    mode: RenewalMode,
    writes: &[(u64, Outcome)],
    released: u64,
) -> Vec<Event> {
    let client = format!("c{}", lease - 1);
    let (from, to) = acquired;
    let mut events = vec![acquire(&client, lease, "k", token, from, to, mode)];
    for (at, outcome) in writes {
        events.push(write(&client, lease, "k", token, *at, outcome.clone()));
    }
    events.push(release(&client, lease, "k", token, released));
    events
}

fn history(exclusion: Requirement, mut events: Vec<Event>) -> History {
    events.sort_by_key(|e| (e.invoked, e.completed));
    History {
        meta: meta(exclusion),
        events,
    }
}

use RenewalMode::{Auto, Manual};

/// A holds `k` with token 1 and writes; B gets `k` at 20 ms with token 2 while A
/// still believes it holds it; A's write at 30 ms lands before B's first write.
fn overlapping(a_late_write: Outcome) -> Vec<Event> {
    vec![
        acquire("c0", 1, "other", 1, 0, 1, Auto),
        write("c0", 1, "other", 1, 25, Outcome::Admitted(1)),
        acquire("c1", 2, "k", 1, 0, 5, Auto),
        write("c1", 2, "k", 1, 10, Outcome::Admitted(1)),
        acquire("c2", 3, "k", 2, 15, 20, Auto),
        write("c1", 2, "k", 1, 30, a_late_write),
        write("c2", 3, "k", 2, 40, Outcome::Admitted(3)),
        release("c1", 2, "k", 1, 45),
        release("c2", 3, "k", 2, 50),
        release("c0", 1, "other", 1, 60),
    ]
}

#[test]
fn a_clean_history_has_no_violation() {
    let h = history(
        Requirement::Required,
        [
            hold(1, 5, (0, 2), Auto, &[(3, Outcome::Admitted(1))], 4),
            hold(2, 6, (3, 6), Manual, &[(7, Outcome::Admitted(2))], 8),
            vec![write("c0", 1, "k", 5, 9, Outcome::Stale(6))],
        ]
        .concat(),
    );
    let findings = check(&h);
    assert_eq!(findings.violations, vec![], "{}", verdict(&h, &findings));
    assert_eq!(findings.stats.acquired, 2);
    assert_eq!(findings.stats.admitted, 2);
    assert_eq!(findings.stats.refused, 1);
}

#[test]
fn an_overlap_with_both_writes_admitted_is_found_with_its_window() {
    let h = history(Requirement::Required, overlapping(Outcome::Admitted(2)));
    let findings = check(&h);
    let overlap = Violation::Overlap(Overlap {
        key: "k".into(),
        first: 2,
        second: 3,
        from: 20 * MS,
        to: 30 * MS,
    });
    assert_eq!(findings.violations, vec![overlap.clone()]);
    assert_eq!(findings.stats.max_overlap, Duration::from_millis(10));
    assert_eq!(findings.failures(&h).count(), 1);

    // The window: the two acquires and A's write inside the overlap; not A's
    // earlier write, not B's later one, nothing of the other key.
    let w = window(&h, &overlap);
    assert_eq!(w.events, vec![1, 3, 5], "{w:?}");
    assert_eq!((w.from, w.to), (20 * MS, 30 * MS));
    let text = render(&h, &overlap);
    assert!(text.contains("overlap on `k`: leases 2 and 3"), "{text}");
    assert!(text.contains("for at least 10.000 ms"), "{text}");
    assert!(text.contains("-20.000 ..    -15.000  c1"), "{text}");
    assert!(text.contains("+10.000 ..    +10.000  c1"), "{text}");
    assert!(!text.contains("other"), "{text}");
}

#[test]
fn an_overlap_whose_late_write_was_refused_is_no_violation() {
    let h = history(Requirement::Required, overlapping(Outcome::Stale(2)));
    assert_eq!(check(&h).violations, vec![]);
}

#[test]
fn a_measured_overlap_is_counted_not_failed() {
    let h = history(Requirement::Measured, overlapping(Outcome::Admitted(2)));
    let findings = check(&h);
    assert_eq!(findings.count("overlap"), 1);
    assert_eq!(findings.failures(&h).count(), 0);
    let text = verdict(&h, &findings);
    assert!(
        text.contains("overlaps 1 (measured, max 10.000 ms)"),
        "{text}"
    );
    assert!(text.contains("measured: overlap on `k`"), "{text}");
}

#[test]
fn a_token_not_above_an_earlier_holders_is_found() {
    let h = history(
        Requirement::Required,
        [
            hold(1, 5, (0, 2), Auto, &[], 4),
            hold(2, 5, (10, 12), Auto, &[], 14),
        ]
        .concat(),
    );
    let findings = check(&h);
    let expected = Violation::TokenNotRising {
        key: "k".into(),
        order: Order::Acquisition,
        earlier: 0,
        later: 2,
    };
    assert_eq!(findings.violations, vec![expected.clone()]);
    let text = render(&h, &expected);
    assert!(
        text.contains("lease 2 got token 5 after lease 1 had 5"),
        "{text}"
    );
    assert_eq!(window(&h, &expected).events, vec![0, 1, 2]);
}

#[test]
fn two_leases_admitted_with_one_token_break_acceptance_order() {
    // Concurrent acquires (so acquisition order says nothing) with equal tokens.
    let h = history(
        Requirement::Measured,
        [
            hold(1, 7, (0, 10), Auto, &[(12, Outcome::Admitted(1))], 13),
            hold(2, 7, (5, 15), Auto, &[(30, Outcome::Admitted(2))], 31),
        ]
        .concat(),
    );
    let findings = check(&h);
    let acceptance: Vec<&Violation> = findings
        .violations
        .iter()
        .filter(|v| {
            matches!(
                v,
                Violation::TokenNotRising {
                    order: Order::Acceptance,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(acceptance.len(), 1, "{:?}", findings.violations);
    assert_eq!(
        findings.failures(&h).count(),
        1,
        "token order is required even when exclusion is measured"
    );
}

#[test]
fn a_stale_write_admitted_is_found() {
    let h = history(
        Requirement::Measured,
        [
            hold(1, 8, (0, 1), Auto, &[(20, Outcome::Admitted(2))], 21),
            hold(2, 9, (0, 2), Auto, &[(10, Outcome::Admitted(1))], 11),
        ]
        .concat(),
    );
    let findings = check(&h);
    let stale = Violation::StaleAdmitted {
        key: "k".into(),
        write: 4,
        highest_write: 2,
    };
    assert!(
        findings.violations.contains(&stale),
        "{:?}",
        findings.violations
    );
    assert!(
        findings.failures(&h).any(|v| *v == stale),
        "stale admitted is required even when exclusion is measured"
    );
    let text = render(&h, &stale);
    assert!(
        text.contains("lease 1 wrote with token 8 after lease 2's token 9 was admitted"),
        "{text}"
    );
    assert_eq!(window(&h, &stale).events, vec![2, 3, 4]);
}
