//! What a chaos run prints: a verdict with the windows of its failures, and a
//! row per trial for the table `just chaos` ends with.

use super::check::{Findings, Violation};
use super::history::{History, Requirement};
use super::run::Report;
use super::window::{ms, render};
use std::fmt::Write as _;

/// Failures printed with their window; the rest are counted.
const SHOWN: usize = 3;

/// One row of the summary table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The trial.
    pub trial: String,
    /// Whether it passed.
    pub passed: bool,
    /// Successful acquisitions.
    pub cycles: usize,
    /// Faults by kind, as `kind×n` words.
    pub faults: String,
    /// Admitted fenced writes.
    pub admitted: usize,
    /// Refused (stale) fenced writes.
    pub refused: usize,
    /// Overlaps with both writes admitted.
    pub overlaps: usize,
    /// Stale writes admitted.
    pub stale_admitted: usize,
    /// Tokens out of order.
    pub token_order: usize,
    /// Missed lost signals.
    pub missed_lost: usize,
    /// The longest overlap, in ms.
    pub max_overlap: String,
    /// Whether overlaps are required to be absent or only measured.
    pub exclusion: Requirement,
}

impl Row {
    /// The row of a trial that did not run to its end (its servers did not
    /// start, say): FAILED, with nothing counted, so that the table still
    /// lists every trial.
    pub fn not_run(trial: &str, exclusion: Requirement) -> Row {
        Row {
            trial: trial.to_owned(),
            passed: false,
            cycles: 0,
            faults: "(did not run)".into(),
            admitted: 0,
            refused: 0,
            overlaps: 0,
            stale_admitted: 0,
            token_order: 0,
            missed_lost: 0,
            max_overlap: "-".into(),
            exclusion,
        }
    }
}

impl Report {
    /// True when no required property was violated and nothing else went
    /// wrong (see [`Report::errors`]).
    pub fn passed(&self) -> bool {
        self.errors.is_empty() && self.findings.failures(&self.history).next().is_none()
    }

    /// The table row.
    pub fn row(&self) -> Row {
        row(&self.history, &self.findings, self.passed())
    }

    /// The full account: the history file, the counts, every fault error, and
    /// the windows of the first failures (or of the longest measured overlap).
    pub fn text(&self) -> String {
        let mut out = verdict(&self.history, &self.findings);
        let _ = writeln!(
            out,
            "history: {} (re-check: just chaos-check FILE)",
            self.file.display()
        );
        for error in &self.errors {
            let _ = writeln!(out, "error: {error}");
        }
        out
    }
}

/// The verdict over a history: counts, then the windows that show failures
/// (or the longest measured overlap, when nothing failed).
pub fn verdict(history: &History, findings: &Findings) -> String {
    let s = &findings.stats;
    let mut out = format!(
        "{}: {} cycles ({} not acquired, {} errors), {} writes admitted, {} refused, {} lost signals; faults: {}\n",
        history.meta.trial,
        s.acquired,
        s.not_acquired,
        s.acquire_errors,
        s.admitted,
        s.refused,
        s.lost,
        faults(findings)
    );
    let _ = writeln!(
        out,
        "  two holders {}, overlaps {} ({}, max {} ms), stale admitted {}, tokens out of order {} ({}), missed lost {}",
        s.superseded,
        findings.count("overlap"),
        requirement(history.meta.exclusion),
        ms(u64::try_from(s.max_overlap.as_nanos()).unwrap_or(u64::MAX)),
        findings.count("stale-admitted"),
        findings.count("token-order"),
        requirement(history.meta.token_order),
        findings.count("missed-lost"),
    );
    let failures: Vec<&Violation> = findings.failures(history).collect();
    for violation in failures.iter().take(SHOWN) {
        let _ = write!(out, "FAILED: {}", render(history, violation));
    }
    if failures.len() > SHOWN {
        let _ = writeln!(out, "… and {} more failures", failures.len() - SHOWN);
    }
    if failures.is_empty()
        && let Some(longest) = longest_overlap(findings)
    {
        let _ = write!(out, "measured: {}", render(history, longest));
    }
    out
}

fn longest_overlap(findings: &Findings) -> Option<&Violation> {
    findings
        .violations
        .iter()
        .filter_map(|v| match v {
            Violation::Overlap(o) => Some((o.to - o.from, v)),
            _ => None,
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, v)| v)
}

fn requirement(r: Requirement) -> &'static str {
    match r {
        Requirement::Required => "required",
        Requirement::Measured => "measured",
    }
}

fn faults(findings: &Findings) -> String {
    let words: Vec<String> = findings
        .stats
        .faults
        .iter()
        .map(|(kind, n)| format!("{kind}×{n}"))
        .collect();
    if words.is_empty() {
        "none".into()
    } else {
        words.join(" ")
    }
}

/// The row of one history.
pub fn row(history: &History, findings: &Findings, passed: bool) -> Row {
    let s = &findings.stats;
    Row {
        trial: history.meta.trial.clone(),
        passed,
        cycles: s.acquired,
        faults: faults(findings),
        admitted: s.admitted,
        refused: s.refused,
        overlaps: findings.count("overlap"),
        stale_admitted: findings.count("stale-admitted"),
        token_order: findings.count("token-order"),
        missed_lost: findings.count("missed-lost"),
        max_overlap: ms(u64::try_from(s.max_overlap.as_nanos()).unwrap_or(u64::MAX)),
        exclusion: history.meta.exclusion,
    }
}

/// A Markdown table of `rows`, sorted by trial.
pub fn table(rows: &[Row]) -> String {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| a.trial.cmp(&b.trial));
    let mut out = String::from(
        "| trial | verdict | cycles | faults | admitted | refused | overlaps | max overlap ms | stale admitted | tokens out of order | missed lost |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let measured = match r.exclusion {
            Requirement::Measured => " (measured)",
            Requirement::Required => "",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {}{measured} | {} | {} | {} | {} |",
            r.trial,
            if r.passed { "ok" } else { "FAILED" },
            r.cycles,
            r.faults,
            r.admitted,
            r.refused,
            r.overlaps,
            r.max_overlap,
            r.stale_admitted,
            r.token_order,
            r.missed_lost
        );
    }
    out
}
