//! `distlock demo` tells its three-part story and exits 0.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

mod support;
use support::{assert_code, run, stdout};

/// The number in the `sold` column of the row starting with `label`.
fn sold(out: &str, label: &str) -> u32 {
    let row = out
        .lines()
        .find(|line| line.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{out}"));
    row.trim_start()[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sold count in {row:?}"))
}

#[test]
fn demo_oversells_without_a_lock_sells_exactly_with_one_and_fences_the_paused_holder() {
    let out = run(&["demo"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(sold(&text, "1. without a lock") > 200, "{text}");
    assert_eq!(sold(&text, "2. with a distlock lock"), 200, "{text}");
    assert!(
        text.contains("OVERSOLD") && text.contains("exactly 200"),
        "{text}"
    );
    let late_write = text
        .lines()
        .find(|line| line.contains("writes price=80"))
        .unwrap_or_else(|| panic!("no late write in:\n{text}"));
    assert!(late_write.contains("REJECTED"), "{late_write}");
    assert!(text.contains("final price: 90"), "{text}");
}

#[test]
fn demo_scales_to_other_sizes_and_named_memory_stores() {
    let out = run(&[
        "demo",
        "--url",
        "memory://other",
        "--items",
        "10",
        "--buyers",
        "50",
    ]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert_eq!(sold(&text, "2. with a distlock lock"), 10, "{text}");
}
