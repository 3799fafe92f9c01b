//! Histories recorded on a 3-member etcd (`etcd_cluster::chaos`), one per
//! kind of cluster event, checked as recorded and with the one change that
//! would make each unsafe: the checker must pass the first and flag the
//! second. Times in the files are nanoseconds since the run started.

use super::*;

/// Key `k2` around a `partition-holder` of node0: c3 (on node0) holds lease 13
/// while its member is cut off; its writes during the cut are admitted, its
/// release times out, and after the partition heals c5 gets the key with a
/// higher token.
const PARTITION_HEALS: &str = include_str!("partition_heals.history");

/// Key `k2` around a `server-kill` of node2: the queue survives the kill and
/// the restart; c2 (on node2) is granted the key after its member is back,
/// and the waiters follow one at a time with rising tokens.
const MEMBER_KILL: &str = include_str!("member_kill.history");

pub(super) fn recorded(text: &str) -> History {
    History::parse(text).unwrap()
}

/// Moves lease `lease`'s acquire to complete at `at_ms`.
fn granted_at(history: &mut History, lease: u64, at_ms: u64) {
    let acquire = history
        .events
        .iter_mut()
        .find(|e| e.lease == lease && matches!(e.op, Op::Acquire { .. }))
        .unwrap();
    acquire.invoked = (at_ms - 10) * MS;
    acquire.completed = at_ms * MS;
    history.events.sort_by_key(|e| (e.invoked, e.completed));
}

/// The recorded history passes, with its one fault counted.
fn passes(h: &History, fault: &str) {
    let findings = check(h);
    assert_eq!(findings.violations, vec![], "{}", verdict(h, &findings));
    assert_eq!(findings.stats.faults.get(fault), Some(&1));
}

/// Leases `first` and `second` overlap with both writes admitted, and that fails.
pub(super) fn flagged(h: &History, first: u64, second: u64) {
    let findings = check(h);
    let overlaps = findings
        .failures(h)
        .filter(|v| matches!(v, Violation::Overlap(o) if o.first == first && o.second == second));
    assert_eq!(overlaps.count(), 1, "{}", verdict(h, &findings));
}

#[test]
fn a_recorded_partition_that_heals_passes() {
    passes(&recorded(PARTITION_HEALS), "partition-holder");
}

#[test]
fn a_majority_granting_while_the_cut_holder_still_writes_is_flagged() {
    // What a cluster without quorum leases would do: the majority hands the
    // key to c5 (lease 31) at 2710 ms, while c3, cut off with its member,
    // still believes and writes at 2737 and 2767 ms, before c5's first write.
    let mut h = recorded(PARTITION_HEALS);
    granted_at(&mut h, 31, 2710);
    flagged(&h, 13, 31);
}

#[test]
fn a_recorded_member_kill_passes() {
    passes(&recorded(MEMBER_KILL), "server-kill");
}

#[test]
fn a_restarted_member_granting_a_held_key_again_is_flagged() {
    // What a member that forgot the lock over its restart would do: c3
    // (lease 134) is granted k2 at 43420 ms while c2 still holds it, and c2's
    // writes at 43440 and 43473 ms land before c3's first.
    let mut h = recorded(MEMBER_KILL);
    granted_at(&mut h, 134, 43420);
    flagged(&h, 130, 134);
}
