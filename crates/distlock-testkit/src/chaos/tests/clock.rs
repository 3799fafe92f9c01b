//! Histories of moved server clocks. One recorded by `redlock::clock_jump`
//! (3 nodes), checked as recorded (measured: Redlock's exclusion rests on
//! clocks) and with the changes that would make it fail: a trial that
//! required exclusion, and a fence that admitted the late write. One
//! recorded by `postgres::clock_step_back`, which passes, and flagged with
//! the token a clock-only reseed would have given.

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

/// Key `k32` of `postgres::clock_step_back` (`version_cas`, `state_ttl=2s`):
/// three leases with clock-seeded tokens, then the name sits idle and is
/// collected; the server clock is stepped back an hour; c4 (lease 101)
/// locks it again and gets a token one above the namespace's floor, still
/// above the earlier ones (the clock alone would have given one an hour
/// lower); a second step, and c1 (lease 197) gets the next one.
const CLOCK_STEP_BACK: &str = include_str!("clock_step_back.history");

/// An hour in microseconds: what a token seeded from the stepped-back clock
/// alone would have lacked.
const HOUR_US: u64 = 3_600_000_000;

#[test]
fn a_recorded_clock_step_back_after_a_collection_passes() {
    let h = recorded(CLOCK_STEP_BACK);
    let findings = check(&h);
    assert_eq!(findings.violations, vec![], "{}", verdict(&h, &findings));
    assert_eq!(findings.stats.faults.get("clock-step-back"), Some(&2));
}

#[test]
fn a_name_reseeded_from_the_stepped_back_clock_alone_is_flagged() {
    let mut h = recorded(CLOCK_STEP_BACK);
    for event in h.events.iter_mut().filter(|e| e.lease == 101) {
        event.token = event.token.map(|token| token - HOUR_US);
    }
    let findings = check(&h);
    let acquires = |v: &&Violation| {
        matches!(v, Violation::TokenNotRising { order: Order::Acquisition, later, .. }
            if h.events[*later].lease == 101)
    };
    let failures: Vec<&Violation> = findings.failures(&h).collect();
    assert!(failures.iter().any(acquires), "{}", verdict(&h, &findings));
    // And the fence, had it admitted those writes, admitted stale ones.
    assert!(
        failures.iter().any(
            |v| matches!(v, Violation::StaleAdmitted { write, .. } if h.events[*write].lease == 101)
        ),
        "{}",
        verdict(&h, &findings)
    );
}
