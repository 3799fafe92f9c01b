//! The bench's results as a table for people or JSON for machines: one line
//! per phase, with its ratio to the protocol floor and the server requests one
//! operation cost.

use super::Phase;
use crate::args::show;
use distlock::toolkit::Floor;
use std::fmt::Write;
use std::time::Duration;

/// One phase and the server requests per operation it cost, when counted.
pub(super) struct Line {
    pub phase: Phase,
    pub requests: Option<f64>,
}

const FLOOR: &str = "protocol floor";
const READ: &str = "read round trip";
const UNCONTENDED: &str = "uncontended cycle";
const HANDOFF: &str = "contended hand-off";

/// Everything one run measured.
pub(super) struct Report {
    heading: String,
    json_head: String,
    /// The floor and its line, and the read's request name with its line.
    floor: Option<(Floor, Line)>,
    read: Option<(&'static str, Line)>,
    uncontended: Option<Line>,
    handoff: Option<Line>,
}

impl Report {
    pub fn new(backend: &str, url: &str, clients: u32, keys: u32, duration: Duration) -> Self {
        let url = distlock::redact_url(url);
        let heading = format!(
            "distlock bench: {backend} at {url}, {clients} clients, {keys} hand-off key{}, {}",
            if keys == 1 { "" } else { "s" },
            show(duration)
        );
        let json_head = format!(
            r#""backend":{},"url":{},"clients":{clients},"keys":{keys},"duration_secs":{:.3}"#,
            quote(backend),
            quote(&url),
            duration.as_secs_f64(),
        );
        Report {
            heading,
            json_head,
            floor: None,
            read: None,
            uncontended: None,
            handoff: None,
        }
    }

    pub fn floor(&mut self, floor: Floor, line: Line) {
        self.floor = Some((floor, line));
    }

    pub fn read(&mut self, name: &'static str, line: Line) {
        self.read = Some((name, line));
    }

    pub fn uncontended(&mut self, line: Line) {
        self.uncontended = Some(line);
    }

    pub fn handoff(&mut self, line: Line) {
        self.handoff = Some(line);
    }

    pub fn heading(&self) -> String {
        self.heading.clone()
    }

    /// Each measured line with its label, in the order they ran.
    pub fn lines(&self) -> impl Iterator<Item = (&'static str, &Line)> {
        [
            (FLOOR, self.floor.as_ref().map(|(_, line)| line)),
            (READ, self.read.as_ref().map(|(_, line)| line)),
            (UNCONTENDED, self.uncontended.as_ref()),
            (HANDOFF, self.handoff.as_ref()),
        ]
        .into_iter()
        .filter_map(|(label, line)| Some((label, line?)))
    }

    pub fn lines_mut(&mut self) -> impl Iterator<Item = (String, &mut Line)> {
        [
            (FLOOR, self.floor.as_mut().map(|(_, line)| line)),
            (READ, self.read.as_mut().map(|(_, line)| line)),
            (UNCONTENDED, self.uncontended.as_mut()),
            (HANDOFF, self.handoff.as_mut()),
        ]
        .into_iter()
        .filter_map(|(label, line)| Some((label.to_owned(), line?)))
    }

    /// Both lock phases completed at least one cycle.
    pub fn cycles_completed(&self) -> bool {
        let done = |line: &Option<Line>| line.as_ref().is_some_and(|l| l.phase.summary.ops > 0);
        done(&self.uncontended) && done(&self.handoff)
    }

    /// What the ratio column divides by: the floor, or without one the read.
    fn base(&self) -> (&'static str, Option<Duration>) {
        match (&self.floor, &self.read) {
            (Some((_, floor)), _) => ("floor", floor.phase.summary.p50),
            (None, Some((_, read))) => ("read", read.phase.summary.p50),
            (None, None) => ("floor", None),
        }
    }

    pub fn table(&self) -> String {
        let (base_name, base) = self.base();
        let mut out = format!("{}\n", self.heading);
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>10} {:>9} {:>9} {:>9} {:>10} {:>14}",
            "",
            "ops",
            "ops/s",
            "p50",
            "p90",
            "p99",
            format!("p50/{base_name}"),
            "server req/op"
        );
        let cell = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), show);
        for (label, line) in self.lines() {
            let s = &line.phase.summary;
            let _ = writeln!(
                out,
                "{label:<20} {:>9} {:>10.0} {:>9} {:>9} {:>9} {:>10} {:>14}",
                s.ops,
                s.per_second,
                cell(s.p50),
                cell(s.p90),
                cell(s.p99),
                ratio(s.p50, base).map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
                line.requests
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            );
        }
        if let Some((floor, _)) = &self.floor {
            let _ = writeln!(
                out,
                "{FLOOR}: {}, the protocol's own write sequence ({} server requests)",
                floor.name, floor.requests
            );
        }
        if let Some((name, _)) = &self.read {
            let _ = writeln!(out, "{READ}: {name}");
        }
        if self.lines().any(|(_, line)| line.requests.is_some()) {
            let _ = writeln!(
                out,
                "server req/op: requests the server's own counters grew by, per operation \
                 (a hand-off line's operation is one contended acquire + release)"
            );
        }
        out
    }

    pub fn json(&self) -> String {
        let (_, base) = self.base();
        let micros = |d: Option<Duration>| {
            d.map_or_else(
                || "null".to_owned(),
                |d| format!("{:.1}", d.as_secs_f64() * 1e6),
            )
        };
        let number =
            |value: Option<f64>| value.map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"));
        let phases: Vec<String> = self
            .lines()
            .map(|(label, line)| {
                let s = &line.phase.summary;
                format!(
                    r#"{{"phase":{},"ops":{},"ops_per_sec":{:.1},"p50_us":{},"p90_us":{},"p99_us":{},"p50_ratio_to_floor":{},"server_requests_per_op":{},"errors":{}}}"#,
                    quote(label),
                    s.ops,
                    s.per_second,
                    micros(s.p50),
                    micros(s.p90),
                    micros(s.p99),
                    number(ratio(s.p50, base)),
                    number(line.requests),
                    line.phase.errors,
                )
            })
            .collect();
        let (floor, floor_requests) = self.floor.as_ref().map_or_else(
            || ("null".to_owned(), "null".to_owned()),
            |(floor, _)| (quote(floor.name), floor.requests.to_string()),
        );
        let read = self
            .read
            .as_ref()
            .map_or_else(|| "null".to_owned(), |(name, _)| quote(name));
        format!(
            r#"{{{},"floor":{floor},"floor_requests":{floor_requests},"read":{read},"phases":[{}]}}"#,
            self.json_head,
            phases.join(",")
        )
    }
}

fn ratio(value: Option<Duration>, base: Option<Duration>) -> Option<f64> {
    let (value, base) = (value?, base?);
    (!base.is_zero()).then(|| value.as_secs_f64() / base.as_secs_f64())
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
