//! A history recorded by `redlock::clock_jump` (3 nodes), checked as recorded
//! (measured: Redlock's exclusion rests on clocks) and with the changes that
//! would make it fail: a trial that required exclusion, and a fence that
//! admitted the late write.

use super::cluster::{flagged, recorded};
use super::*;

/// Key `k2` around a jump of node0's clock by 1582 ms: c3 (lease 279) has
/// just been granted the key when node0's copy of it expires at once; c5
/// (lease 280), waiting, wins node0 and the node c3 did not hold, 9 ms later,
/// with a higher token. c3 still believes and writes first (admitted, before
/// c5's first write), then c5 writes, then c3's next write is refused as
/// stale, and its release finds the lock gone.
const CLOCK_JUMP: &str = include_str!("clock_jump.history");

#[test]
fn a_recorded_clock_jump_shows_two_holders_measured_and_the_late_write_refused() {
    let h = recorded(CLOCK_JUMP);
    let findings = check(&h);
    assert_eq!(
        findings.failures(&h).count(),
        0,
        "{}",
        verdict(&h, &findings)
    );
    assert_eq!(
        findings.violations,
        vec![Violation::Overlap(Overlap {
            key: "chaos-9c2e1798/k2".into(),
            first: 279,
            second: 280,
            from: 28_055_748_631,
            to: 28_071_188_595,
        })]
    );
    let s = &findings.stats;
    assert_eq!((s.superseded, s.refused), (1, 1));
    assert_eq!(s.faults.get("clock-jump"), Some(&1));
}

#[test]
fn the_same_history_fails_where_exclusion_is_required() {
    let mut h = recorded(CLOCK_JUMP);
    h.meta.exclusion = Requirement::Required;
    flagged(&h, 279, 280);
}

#[test]
fn a_fence_admitting_the_superseded_holders_late_write_is_flagged() {
    let mut h = recorded(CLOCK_JUMP);
    let late = h
        .events
        .iter()
        .position(|e| matches!(e.outcome, Outcome::Stale(_)))
        .unwrap();
    h.events[late].outcome = Outcome::Admitted(235);
    let findings = check(&h);
    let stale: Vec<&Violation> = findings
        .failures(&h)
        .filter(|v| matches!(v, Violation::StaleAdmitted { write, .. } if *write == late))
        .collect();
    assert_eq!(stale.len(), 1, "{}", verdict(&h, &findings));
}
