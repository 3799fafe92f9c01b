//! The read-write lock's rules on rows alone (no server).

use super::*;

/// A live row (700 ms left) or an expired one.
fn row(slot: u32, owner: &str, fence: u64, live: bool) -> ShareRow {
    ShareRow {
        slot,
        permits: None,
        owner: Some(owner.as_bytes().to_vec()),
        live,
        remaining: Duration::from_millis(if live { 700 } else { 0 }),
        fence,
    }
}

fn share(mode: RwMode, waits: bool) -> Share {
    Share {
        backend: "test",
        mode,
        waits,
        ttl: Duration::from_secs(30),
    }
}

fn taken_slot(plan: Plan) -> Option<u32> {
    match plan {
        Plan::Take { slot, .. } => Some(slot),
        _ => None,
    }
}

fn mark(plan: Plan) -> Option<Mark> {
    match plan {
        Plan::Wait { mark, .. } => mark,
        other => panic!("expected a wait, got {other:?}"),
    }
}

const WAITING_WRITER: u32 = QUEUE_FIRST;
const WAITING_READER: u32 = QUEUE_FIRST + 1;

#[test]
fn readers_share_and_queue_behind_an_earlier_waiting_writer_only() {
    let mut rows = vec![
        row(HEAD_SLOT, "", 9, false),
        row(1, "r1", 3, true),
        row(2, "r2", 4, false),
        row(3, "r3", 5, true),
    ];
    let read = share(RwMode::Read, true);
    assert_eq!(
        taken_slot(read.plan(&rows, b"me")),
        Some(2),
        "lowest free reader slot"
    );
    rows.push(row(WAITING_WRITER, "w", 6, true));
    let placed = mark(read.plan(&rows, b"me")).expect("a blocked reader takes a place");
    assert_eq!(
        placed,
        Mark {
            slot: WAITING_READER,
            ttl: PLACE_TTL,
            ticket: None
        },
        "a new place, ticketed by this attempt"
    );
    // A reader that arrived before the writer (ticket 5 < 6) is not held
    // up by it; one that arrived after (7) is.
    rows.push(row(WAITING_READER, "early", 5, true));
    assert_eq!(taken_slot(read.plan(&rows, b"early")), Some(2));
    rows.push(row(WAITING_READER + 2, "late", 7, true));
    assert_eq!(taken_slot(read.plan(&rows, b"late")), None);
}

#[test]
fn a_writer_waits_for_shares_and_earlier_places_and_renews_its_own_late() {
    let rows = vec![row(1, "r", 3, true), row(WAITING_WRITER, "w", 4, true)];
    let write = share(RwMode::Write, true);
    // Its place has 700 ms of 2 s left: renewed, keeping its ticket.
    assert_eq!(
        mark(write.plan(&rows, b"w")),
        Some(Mark {
            slot: WAITING_WRITER,
            ttl: PLACE_TTL,
            ticket: Some(4)
        })
    );
    let fresh = vec![
        row(1, "r", 3, true),
        ShareRow {
            remaining: Duration::from_millis(1900),
            ..row(WAITING_WRITER, "w", 4, true)
        },
    ];
    assert_eq!(
        mark(write.plan(&fresh, b"w")),
        None,
        "a fresh place is left alone"
    );
    // A second writer queues behind the first, in the next writer place.
    assert_eq!(
        mark(write.plan(&rows, b"other")).map(|m| m.slot),
        Some(WAITING_WRITER + 2)
    );
    // The readers gone, the first writer's turn has come, not the second's.
    let turn = vec![
        row(WAITING_WRITER, "w", 4, true),
        row(WAITING_WRITER + 2, "x", 8, true),
    ];
    assert_eq!(taken_slot(write.plan(&turn, b"w")), Some(WRITER_SLOT));
    assert_eq!(taken_slot(write.plan(&turn, b"x")), None);
}

#[test]
fn a_writer_takes_slot_zero_only_alone_and_try_write_takes_no_place() {
    let expired = vec![
        row(0, "old", 1, false),
        row(WAITING_WRITER, "gone", 2, false),
    ];
    let write = share(RwMode::Write, false);
    assert_eq!(taken_slot(write.plan(&expired, b"me")), Some(WRITER_SLOT));
    let held = vec![row(0, "w", 3, true)];
    assert_eq!(
        mark(write.plan(&held, b"me")),
        None,
        "Wait::No takes no place"
    );
    assert!(taken_slot(share(RwMode::Read, true).plan(&held, b"me")).is_none());
}

#[test]
fn slots_of_each_kind_are_told_apart() {
    assert_eq!(slot_kind(0), Slot::Writer);
    assert_eq!(slot_kind(QUEUE_FIRST - 1), Slot::Reader);
    assert_eq!(slot_kind(QUEUE_FIRST), Slot::Waiting(RwMode::Write));
    assert_eq!(slot_kind(QUEUE_FIRST + 1), Slot::Waiting(RwMode::Read));
    // The largest place below the head, and the head itself.
    assert_eq!(slot_kind(HEAD_SLOT - 2), Slot::Waiting(RwMode::Read));
    assert_eq!(slot_kind(HEAD_SLOT), Slot::Head);
}
