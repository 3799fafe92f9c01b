//! A history recorded by `redis_sentinel::chaos` around a failover, checked as
//! recorded (token order is measured through Sentinel: a failover may lose the
//! newest counter) and with the changes that would make it fail: a trial that
//! required token order, and a fence that admitted a stale write.

use super::cluster::recorded;
use super::*;

/// Key `k1` around a 2 s `server-pause` of the primary, node0: the Sentinels
/// promote the replica, where c2 (lease 108) is granted the key with a token
/// seeded above node0's; when node0 resumes, clients still connected to it are
/// granted the key again with node0's lower tokens (leases 104, 107, 110, 113,
/// 120, 126) until it is demoted. Every write of theirs is refused as stale,
/// since the fence had admitted c2's higher token.
const SENTINEL_FAILOVER: &str = include_str!("sentinel_failover.history");

/// The leases granted on the resumed old primary, below c2's token.
const SPLIT_BRAIN: [u64; 6] = [104, 107, 110, 113, 120, 126];

#[test]
fn a_recorded_failover_passes_with_token_order_measured_and_every_stale_write_refused() {
    let h = recorded(SENTINEL_FAILOVER);
    let findings = check(&h);
    assert_eq!(
        findings.failures(&h).count(),
        0,
        "{}",
        verdict(&h, &findings)
    );
    let stale = h
        .events
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Stale(_)))
        .count();
    assert_eq!(stale, 6);
    assert_eq!(findings.stats.faults.get("server-pause"), Some(&1));
    assert!(
        findings
            .violations
            .iter()
            .any(|v| matches!(v, Violation::TokenNotRising { .. })),
        "{}",
        verdict(&h, &findings)
    );
}

#[test]
fn the_same_history_fails_where_token_order_is_required() {
    let mut h = recorded(SENTINEL_FAILOVER);
    h.meta.token_order = Requirement::Required;
    let findings = check(&h);
    let later: Vec<u64> = findings
        .failures(&h)
        .filter_map(|v| match v {
            Violation::TokenNotRising { later, .. } => Some(h.events[*later].lease),
            _ => None,
        })
        .collect();
    assert!(
        later.iter().all(|lease| SPLIT_BRAIN.contains(lease)) && !later.is_empty(),
        "{later:?}\n{}",
        verdict(&h, &findings)
    );
}

#[test]
fn a_fence_admitting_a_split_brain_write_is_flagged() {
    let mut h = recorded(SENTINEL_FAILOVER);
    let late = h
        .events
        .iter()
        .position(|e| matches!(e.outcome, Outcome::Stale(_)))
        .unwrap();
    h.events[late].outcome = Outcome::Admitted(40);
    let findings = check(&h);
    let stale = findings
        .failures(&h)
        .filter(|v| matches!(v, Violation::StaleAdmitted { write, .. } if *write == late));
    assert_eq!(stale.count(), 1, "{}", verdict(&h, &findings));
}
