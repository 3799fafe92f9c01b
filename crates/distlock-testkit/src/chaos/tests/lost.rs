//! The checker's missed-lost cases: a lease taken over must have noticed its
//! loss by its deadline (or its bound, when it renews itself), plus the slack.
//! Apart from the exclusion and token cases because they judge time, not order.

use super::*;

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
        [
            hold(1, 1, (0, 1), Manual, &[], 500),
            hold(2, 2, (400, 1100), Auto, &[], 1200),
        ]
        .concat(),
    );
    assert_eq!(check(&h).violations, vec![]);
}
