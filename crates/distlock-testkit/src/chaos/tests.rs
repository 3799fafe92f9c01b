//! The checker fed hand-made histories: each violation is found, reported with
//! its minimal window, and a history survives the trip through its file.

use super::FaultKind;
use super::check::{Order, Violation, check};
use super::history::{Event, History, Meta, Op, Outcome, RenewalMode, Requirement};
use super::report::verdict;
use super::window::{render, window};
use std::time::Duration;

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
        vec![
            acquire("c0", 1, "k", 5, 0, 2, Auto),
            write("c0", 1, "k", 5, 3, Outcome::Admitted(1)),
            release("c0", 1, "k", 5, 4),
            acquire("c1", 2, "k", 6, 3, 6, Manual),
            write("c1", 2, "k", 6, 7, Outcome::Admitted(2)),
            release("c1", 2, "k", 6, 8),
            write("c0", 1, "k", 5, 9, Outcome::Stale(6)),
        ],
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
    let overlap = Violation::Overlap {
        key: "k".into(),
        first: 2,
        second: 3,
        from: 20 * MS,
        to: 30 * MS,
    };
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
        vec![
            acquire("c0", 1, "k", 5, 0, 2, Auto),
            release("c0", 1, "k", 5, 4),
            acquire("c1", 2, "k", 5, 10, 12, Auto),
            release("c1", 2, "k", 5, 14),
        ],
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
        vec![
            acquire("c0", 1, "k", 7, 0, 10, Auto),
            acquire("c1", 2, "k", 7, 5, 15, Auto),
            write("c0", 1, "k", 7, 12, Outcome::Admitted(1)),
            release("c0", 1, "k", 7, 13),
            write("c1", 2, "k", 7, 30, Outcome::Admitted(2)),
            release("c1", 2, "k", 7, 31),
        ],
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
        vec![
            acquire("c0", 1, "k", 8, 0, 1, Auto),
            acquire("c1", 2, "k", 9, 0, 2, Auto),
            write("c1", 2, "k", 9, 10, Outcome::Admitted(1)),
            release("c1", 2, "k", 9, 11),
            write("c0", 1, "k", 8, 20, Outcome::Admitted(2)),
            release("c0", 1, "k", 8, 21),
        ],
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

/// A holds `k` (ttl 1 s); B takes it at 1100 ms; A notices at `noticed`.
fn taken_over(mode: RenewalMode, noticed: u64, extra: Vec<Event>) -> History {
    let mut events = vec![
        acquire("c0", 1, "k", 1, 0, 1, mode),
        write("c0", 1, "k", 1, 2, Outcome::Admitted(1)),
        acquire("c1", 2, "k", 2, 600, 1100, Auto),
        lost("c0", 1, "k", noticed),
        release("c0", 1, "k", 1, noticed + 1),
        release("c1", 2, "k", 2, 3500),
    ];
    events.extend(extra);
    history(Requirement::Required, events)
}

#[test]
fn a_takeover_noticed_after_the_deadline_is_a_missed_lost() {
    // Manual renewal: the deadline is the acquire's sample, 991 ms.
    let h = taken_over(Manual, 3000, vec![]);
    let findings = check(&h);
    let missed = Violation::MissedLost {
        key: "k".into(),
        lease: 1,
        taken_by: 2,
        taken_at: 1100 * MS,
        deadline: 991 * MS,
        noticed: Some(3000 * MS),
    };
    assert_eq!(findings.violations, vec![missed.clone()]);
    let text = render(&h, &missed);
    assert!(
        text.contains("lease 1 was taken over by lease 2 at 1100.000 ms"),
        "{text}"
    );
    assert!(text.contains("but it noticed at 3000.000 ms"), "{text}");
    // A noticed within the slack of its deadline: fine.
    assert_eq!(check(&taken_over(Manual, 1200, vec![])).violations, vec![]);
}

#[test]
fn a_self_renewing_lease_is_judged_by_its_bound_and_a_pause_moves_it() {
    // Bound: 1100 + 1000 − 12 (drift) = 2088 ms, + 250 ms slack.
    assert_eq!(check(&taken_over(Auto, 2300, vec![])).violations, vec![]);
    assert_eq!(
        check(&taken_over(Auto, 2400, vec![])).count("missed-lost"),
        1
    );
    // Frozen for 2 s before its deadline: it could not notice earlier.
    let pause = event("c0", 0, "k", Op::Fault(FaultKind::HolderPause), 500, 2500);
    assert_eq!(
        check(&taken_over(Auto, 4000, vec![pause])).violations,
        vec![]
    );
}

#[test]
fn a_lease_released_before_the_takeover_owes_nothing() {
    let h = history(
        Requirement::Required,
        vec![
            acquire("c0", 1, "k", 1, 0, 1, Manual),
            release("c0", 1, "k", 1, 500),
            acquire("c1", 2, "k", 2, 400, 1100, Auto),
            release("c1", 2, "k", 2, 1200),
        ],
    );
    assert_eq!(check(&h).violations, vec![]);
}

#[test]
fn a_history_survives_its_file() {
    let mut events = overlapping(Outcome::Admitted(2));
    events.push(Event {
        outcome: Outcome::Error("tab\there, newline\nthere, back\\slash".into()),
        ..event("server", 0, "", Op::Fault(FaultKind::ServerKill), 3, 70)
    });
    events.push(Event {
        outcome: Outcome::NotAcquired,
        ..event("h0", 9, "k", Op::Renew, 71, 72)
    });
    events.push(Event {
        outcome: Outcome::Lost("Revoked".into()),
        ..event("h0", 9, "k", Op::Write { checked: false }, 73, 74)
    });
    events.push(event(
        "c1",
        4,
        "k",
        Op::Acquire {
            ttl: Duration::from_millis(1500),
            renewal: Manual,
        },
        75,
        76,
    ));
    let original = history(Requirement::Measured, events);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/run.history");
    original.write_file(&path).unwrap();
    let read = History::read_file(&path).unwrap();
    assert_eq!(read, original);
    assert_eq!(check(&read), check(&original));
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.split('\t').count() == 9)
    );
}

#[test]
fn a_malformed_line_is_refused_by_number() {
    let text = "# trial=x\nc0\t1\tk\twrite\t1\t2\t-\t-\tok\nc0\t1\tk\tjump\t1\t2\t-\t-\tok\n";
    let error = History::parse(text).unwrap_err();
    assert!(error.starts_with("line 3: unknown op `jump`"), "{error}");
    let error = History::parse("c0\t1\tk\n").unwrap_err();
    assert!(
        error.contains("expected 9 tab-separated columns, found 3"),
        "{error}"
    );
}

#[test]
fn every_fault_name_reads_back() {
    for kind in FaultKind::ALL {
        assert_eq!(FaultKind::from_name(kind.name()), Some(kind));
    }
    assert_eq!(
        FaultKind::from_name("network-cut"),
        Some(FaultKind::NetworkCut)
    );
}
