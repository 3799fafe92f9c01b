//! A history's trip through its file, and the names of faults read back: the
//! text form the checker is fed from, apart from the checker's own cases.

use super::*;

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
