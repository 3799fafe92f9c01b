//! A history recorded by `redis_sentinel::chaos` around a failover, checked as
//! recorded (token order is measured through Sentinel: a failover may lose the
//! newest counter) and with the changes that would make it fail: a trial that
//! required token order, and a fence that admitted a stale write. And one
//! recorded by `mysql_replica::lagging` around a failover to a replica 500 ms
//! behind, which lost a grant: passed as recorded, flagged where token order
//! is required, and flagged where exclusion is required once the lost grant's
//! holder writes after the same token is granted again.

use super::cluster::{flagged, recorded};
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

/// Key `k1` of `mysql_replica::lagging` (`version_cas`, the replica's link
/// 500 ms behind) around the first failover, at 2600 ms: c4 (lease 11) was
/// granted token …795 at 2177 ms, which the replica never received. c4 writes
/// once more, then its release fails on the dead primary. Once the replica is
/// promoted, c2 (lease 43) is granted the same token …795 at 3086 ms, and its
/// writes are admitted (the fence admits an equal token).
const LAGGING_FAILOVER: &str = include_str!("lagging_failover.history");

#[test]
fn a_recorded_lagging_failover_passes_with_the_lost_grants_token_granted_again() {
    let h = recorded(LAGGING_FAILOVER);
    let findings = check(&h);
    assert_eq!(
        findings.failures(&h).count(),
        0,
        "{}",
        verdict(&h, &findings)
    );
    let again: Vec<(u64, u64)> = findings
        .violations
        .iter()
        .filter_map(|v| match v {
            Violation::TokenNotRising {
                order: Order::Acquisition,
                earlier,
                later,
                ..
            } => Some((h.events[*earlier].lease, h.events[*later].lease)),
            _ => None,
        })
        .collect();
    assert_eq!(again, vec![(11, 43)], "{}", verdict(&h, &findings));
    assert_eq!(findings.stats.faults.get("failover"), Some(&1));
    assert_eq!(findings.count("overlap"), 0);
}

#[test]
fn the_lagging_failover_fails_where_token_order_is_required() {
    let mut h = recorded(LAGGING_FAILOVER);
    h.meta.token_order = Requirement::Required;
    let findings = check(&h);
    assert!(
        findings.failures(&h).any(
            |v| matches!(v, Violation::TokenNotRising { later, .. } if h.events[*later].lease == 43)
        ),
        "{}",
        verdict(&h, &findings)
    );
}

#[test]
fn the_lost_grants_holder_writing_after_the_same_token_is_granted_again_is_an_overlap() {
    // c4 still working when c2 is granted the token again: its last write
    // and its release come 14 ms after c2's grant, before c2's first write.
    // The fence admits both (equal tokens), so only the checker sees it.
    let mut h = recorded(LAGGING_FAILOVER);
    h.meta.exclusion = Requirement::Required;
    for e in h.events.iter_mut().filter(|e| e.lease == 11) {
        match e.op {
            Op::Write { .. } if e.completed > 2_600 * MS => {
                (e.invoked, e.completed) = (3_100 * MS, 3_100 * MS + 40_000);
            }
            Op::Release => (e.invoked, e.completed) = (3_101 * MS, 3_118 * MS),
            _ => {}
        }
    }
    h.events.sort_by_key(|e| (e.invoked, e.completed));
    flagged(&h, 11, 43);
}
