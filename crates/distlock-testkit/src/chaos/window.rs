//! The minimal slice of a history that shows one violation: the events of the
//! offending key that overlap the offending interval (for an overlap, the time
//! both holders believed and wrote), the events that define it (the two
//! acquires, the admitted writes inside it), and the faults since the earlier
//! of those acquires; one per line, times relative to the interval's start.

use super::check::Violation;
use super::history::{Event, History, Op, Outcome, Requirement};
use super::leases::leases;
use super::text::escape;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// At most this many events are printed per window; a longer one says how many
/// were left out.
const MAX_LINES: usize = 60;

/// The events (indices into [`History::events`]) that show one violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Start of the offending interval, ns since the run started.
    pub from: u64,
    /// Its end.
    pub to: u64,
    /// The events, in history order.
    pub events: Vec<usize>,
}

/// The window of `violation` in `history`.
pub fn window(history: &History, violation: &Violation) -> Window {
    let events = &history.events;
    let (key, from, to, must): (&str, u64, u64, Vec<usize>) = match violation {
        Violation::Overlap(o) => {
            let defining = lease_events(history, &[o.first, o.second])
                .into_iter()
                .filter(|&i| match events[i].op {
                    Op::Acquire { .. } => true,
                    Op::Write { .. } => (o.from..=o.to).contains(&events[i].invoked),
                    _ => false,
                })
                .collect();
            (&o.key, o.from, o.to, defining)
        }
        Violation::TokenNotRising {
            key,
            earlier,
            later,
            ..
        }
        | Violation::StaleAdmitted {
            key,
            highest_write: earlier,
            write: later,
        } => (
            key,
            events[*earlier].invoked,
            events[*later].completed,
            vec![*earlier, *later],
        ),
        Violation::MissedLost {
            key,
            lease,
            taken_by,
            deadline,
            noticed,
            ..
        } => {
            let acquire = leases(history)
                .get(key.as_str())
                .and_then(|ls| ls.iter().find(|l| l.id == *lease).map(|l| l.acquire));
            let end = noticed.map_or(*deadline, |n| n.max(*deadline));
            let must = acquire.into_iter().chain([*taken_by]).collect();
            (key, events[*taken_by].invoked, end, must)
        }
    };
    let mut chosen: BTreeSet<usize> = must.into_iter().collect();
    // Faults since the first defining event: what may explain the violation.
    let since = chosen
        .iter()
        .map(|&i| events[i].invoked)
        .min()
        .unwrap_or(from)
        .min(from);
    for (index, e) in events.iter().enumerate() {
        let (start, relevant) = match e.op {
            Op::Fault(_) => (since, true),
            _ => (from, e.key == key),
        };
        if relevant && e.invoked <= to && e.completed >= start {
            chosen.insert(index);
        }
    }
    Window {
        from,
        to,
        events: chosen.into_iter().collect(),
    }
}

/// The events of these leases.
fn lease_events(history: &History, ids: &[u64]) -> Vec<usize> {
    history
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.lease != 0 && ids.contains(&e.lease))
        .map(|(i, _)| i)
        .collect()
}

/// A readable account of `violation`: what broke, then its window.
pub fn render(history: &History, violation: &Violation) -> String {
    let w = window(history, violation);
    let mut out = format!("{}\n", describe(history, violation));
    let _ = writeln!(
        out,
        "  window: {} events; times in ms relative to {} ms (invoked .. completed)",
        w.events.len(),
        ms(w.from)
    );
    for &index in w.events.iter().take(MAX_LINES) {
        let _ = writeln!(out, "  {}", line(&history.events[index], w.from));
    }
    if w.events.len() > MAX_LINES {
        let _ = writeln!(out, "  … {} more", w.events.len() - MAX_LINES);
    }
    out
}

fn describe(history: &History, violation: &Violation) -> String {
    let e = &history.events;
    let lease_token = |i: usize| {
        let token: String = e[i].token.map_or_else(|| "-".into(), |t| t.to_string());
        (e[i].lease, token)
    };
    let measured = match violation.requirement(history) {
        Requirement::Measured => " [measured, not required here]",
        Requirement::Required => "",
    };
    let what = match violation {
        Violation::Overlap(o) => format!(
            "overlap on `{}`: leases {} and {} both believed they held it and both had \
             writes admitted, for at least {} ms ({} .. {} ms)",
            o.key,
            o.first,
            o.second,
            ms(o.to - o.from),
            ms(o.from),
            ms(o.to)
        ),
        Violation::TokenNotRising {
            key,
            order,
            earlier,
            later,
        } => {
            let ((lease, got), (before, had)) = (lease_token(*later), lease_token(*earlier));
            format!(
                "token not rising on `{key}` ({order:?} order): lease {lease} got token {got} after lease {before} had {had}"
            )
        }
        Violation::StaleAdmitted {
            key,
            write,
            highest_write,
        } => {
            let ((lease, wrote), (before, had)) =
                (lease_token(*write), lease_token(*highest_write));
            format!(
                "stale write admitted on `{key}`: lease {lease} wrote with token {wrote} after lease {before}'s token {had} was admitted"
            )
        }
        Violation::MissedLost {
            key,
            lease,
            taken_by,
            taken_at,
            deadline,
            noticed,
        } => format!(
            "missed lost on `{key}`: lease {lease} was taken over by lease {} at {} ms; its local \
             deadline was {} ms, but it noticed {}",
            e[*taken_by].lease,
            ms(*taken_at),
            ms(*deadline),
            noticed.map_or_else(|| "never".into(), |n| format!("at {} ms", ms(n)))
        ),
    };
    format!("{what}{measured}")
}

fn line(e: &Event, from: u64) -> String {
    let rel = |t: u64| format!("{:>10}", relative(t, from));
    let op = match &e.op {
        Op::Acquire { .. } => "acquire".to_owned(),
        Op::Write { checked: true } => "write".to_owned(),
        Op::Write { checked: false } => "write (unchecked)".to_owned(),
        Op::Renew => "renew".to_owned(),
        Op::Release => "release".to_owned(),
        Op::Lost => "lost".to_owned(),
        Op::Fault(kind) => format!("FAULT {}", kind.name()),
    };
    let outcome = match &e.outcome {
        Outcome::Ok => "ok".to_owned(),
        Outcome::Admitted(n) => format!("admitted #{n}"),
        Outcome::Stale(h) => format!("refused (highest {h})"),
        Outcome::NotAcquired => "not acquired".to_owned(),
        Outcome::Lost(reason) => format!("lost: {}", escape(reason)),
        Outcome::Error(text) => format!("error: {}", escape(text)),
    };
    let mut text = format!(
        "{} .. {}  {:<6} lease {:<5} {:<18} token {:<20} {outcome}",
        rel(e.invoked),
        rel(e.completed),
        e.client,
        e.lease,
        op,
        e.token.map_or_else(|| "-".into(), |t| t.to_string()),
    );
    if let Some(d) = e.deadline {
        let _ = write!(text, "  deadline {}", relative(d, from));
    }
    text
}

/// `t` − `from` in signed milliseconds.
fn relative(t: u64, from: u64) -> String {
    if t >= from {
        format!("+{}", ms(t - from))
    } else {
        format!("-{}", ms(from - t))
    }
}

/// ns as milliseconds with three decimals.
pub(crate) fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, (ns / 1_000) % 1_000)
}
