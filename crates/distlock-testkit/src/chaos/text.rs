//! The text form of a [`History`], which the checker reads back (`just
//! chaos-check FILE`).
//!
//! One event per line, nine tab-separated columns:
//!
//! ```text
//! client  lease  key  op  invoked_ns  completed_ns  token  deadline_ns  outcome
//! ```
//!
//! Times are nanoseconds since the run started. `-` stands for "none". `op` is
//! `acquire:<ttl_ms>:<auto|manual>`, `write`, `write:unchecked`, `renew`,
//! `release`, `lost` or `fault:<kind>` (the client column is then the fault's
//! target); `outcome` is `ok`, `admitted:<n>` (the n-th write the resource
//! accepted), `stale:<highest>`, `not-acquired`, `lost:<reason>` or
//! `error:<text>`. Lines starting with `#` carry the run's settings as
//! `# name=value`. Text is escaped (`\\`, `\t`, `\n`, `\r`) so a line stays one
//! line; the format needs nothing beyond this file.

use super::FaultKind;
use super::history::{Event, History, Meta, Op, Outcome, RenewalMode, Requirement};
use std::path::Path;
use std::time::Duration;

impl History {
    /// The text form (see the module docs).
    pub fn to_text(&self) -> String {
        let m = &self.meta;
        let mut out = format!(
            "# distlock chaos history v1\n# trial={}\n# exclusion={}\n# token_order={}\n# lost_slack_ms={}\n",
            escape(&m.trial),
            requirement_name(m.exclusion),
            requirement_name(m.token_order),
            m.lost_slack.as_millis()
        );
        for e in &self.events {
            let columns = [
                escape(&e.client),
                e.lease.to_string(),
                or_dash(&escape(&e.key)),
                op_text(&e.op),
                e.invoked.to_string(),
                e.completed.to_string(),
                e.token.map_or_else(|| "-".into(), |t| t.to_string()),
                e.deadline.map_or_else(|| "-".into(), |d| d.to_string()),
                outcome_text(&e.outcome),
            ];
            out.push_str(&columns.join("\t"));
            out.push('\n');
        }
        out
    }

    /// Reads the text form back; the error names the line.
    pub fn parse(text: &str) -> Result<History, String> {
        let mut meta = Meta {
            trial: String::new(),
            exclusion: Requirement::Required,
            token_order: Requirement::Required,
            lost_slack: Duration::ZERO,
        };
        let mut events = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let fail = |why: String| format!("line {}: {why}", index + 1);
            if let Some(setting) = line.strip_prefix("# ") {
                if let Some((name, value)) = setting.split_once('=') {
                    read_setting(&mut meta, name, value).map_err(fail)?;
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            events.push(parse_event(line).map_err(fail)?);
        }
        Ok(History { meta, events })
    }

    /// Writes the text form to `path`, creating its directory.
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, self.to_text())
    }

    /// Reads a history written by [`History::write_file`].
    pub fn read_file(path: &Path) -> Result<History, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn read_setting(meta: &mut Meta, name: &str, value: &str) -> Result<(), String> {
    match name {
        "trial" => meta.trial = unescape(value)?,
        "exclusion" => meta.exclusion = parse_requirement(value)?,
        "token_order" => meta.token_order = parse_requirement(value)?,
        "lost_slack_ms" => meta.lost_slack = Duration::from_millis(number(value)?),
        // Unknown settings are comments: later versions may add some.
        _ => {}
    }
    Ok(())
}

fn parse_event(line: &str) -> Result<Event, String> {
    let columns: Vec<&str> = line.split('\t').collect();
    let [
        client,
        lease,
        key,
        op,
        invoked,
        completed,
        token,
        deadline,
        outcome,
    ] = columns[..]
    else {
        return Err(format!(
            "expected 9 tab-separated columns, found {}",
            columns.len()
        ));
    };
    Ok(Event {
        client: unescape(client)?,
        lease: number(lease)?,
        key: if key == "-" {
            String::new()
        } else {
            unescape(key)?
        },
        op: parse_op(op)?,
        invoked: number(invoked)?,
        completed: number(completed)?,
        token: optional(token)?,
        deadline: optional(deadline)?,
        outcome: parse_outcome(outcome)?,
    })
}

fn op_text(op: &Op) -> String {
    match op {
        Op::Acquire { ttl, renewal } => {
            let mode = match renewal {
                RenewalMode::Auto => "auto",
                RenewalMode::Manual => "manual",
            };
            format!("acquire:{}:{mode}", ttl.as_millis())
        }
        Op::Write { checked: true } => "write".into(),
        Op::Write { checked: false } => "write:unchecked".into(),
        Op::Renew => "renew".into(),
        Op::Release => "release".into(),
        Op::Lost => "lost".into(),
        Op::Fault(kind) => format!("fault:{}", kind.name()),
    }
}

fn parse_op(text: &str) -> Result<Op, String> {
    let parts: Vec<&str> = text.split(':').collect();
    Ok(match parts[..] {
        ["acquire", ttl, mode] => Op::Acquire {
            ttl: Duration::from_millis(number(ttl)?),
            renewal: match mode {
                "auto" => RenewalMode::Auto,
                "manual" => RenewalMode::Manual,
                other => return Err(format!("unknown renewal `{other}`")),
            },
        },
        ["write"] => Op::Write { checked: true },
        ["write", "unchecked"] => Op::Write { checked: false },
        ["renew"] => Op::Renew,
        ["release"] => Op::Release,
        ["lost"] => Op::Lost,
        ["fault", kind] => {
            Op::Fault(FaultKind::from_name(kind).ok_or_else(|| format!("unknown fault `{kind}`"))?)
        }
        _ => return Err(format!("unknown op `{text}`")),
    })
}

fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok => "ok".into(),
        Outcome::Admitted(n) => format!("admitted:{n}"),
        Outcome::Stale(highest) => format!("stale:{highest}"),
        Outcome::NotAcquired => "not-acquired".into(),
        Outcome::Lost(reason) => format!("lost:{}", escape(reason)),
        Outcome::Error(text) => format!("error:{}", escape(text)),
    }
}

fn parse_outcome(text: &str) -> Result<Outcome, String> {
    let (word, rest) = text.split_once(':').unwrap_or((text, ""));
    Ok(match word {
        "ok" => Outcome::Ok,
        "admitted" => Outcome::Admitted(number(rest)?),
        "stale" => Outcome::Stale(number(rest)?),
        "not-acquired" => Outcome::NotAcquired,
        "lost" => Outcome::Lost(unescape(rest)?),
        "error" => Outcome::Error(unescape(rest)?),
        _ => return Err(format!("unknown outcome `{text}`")),
    })
}

fn requirement_name(r: Requirement) -> &'static str {
    match r {
        Requirement::Required => "required",
        Requirement::Measured => "measured",
    }
}

fn parse_requirement(text: &str) -> Result<Requirement, String> {
    match text {
        "required" => Ok(Requirement::Required),
        "measured" => Ok(Requirement::Measured),
        other => Err(format!("`{other}` is neither required nor measured")),
    }
}

fn number(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn optional(text: &str) -> Result<Option<u64>, String> {
    if text == "-" {
        Ok(None)
    } else {
        number(text).map(Some)
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.into()
    }
}

/// Escapes what would break a line or a column.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('\\') => '\\',
            Some('t') => '\t',
            Some('n') => '\n',
            Some('r') => '\r',
            other => return Err(format!("bad escape `\\{}`", other.unwrap_or(' '))),
        });
    }
    Ok(out)
}
