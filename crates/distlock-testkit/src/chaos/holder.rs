//! The paused holder: a lock holder in a child process, frozen with SIGSTOP
//! past its ttl and woken to write with its old token, as a process after a
//! long GC pause would.
//!
//! The child's protocol, one line each on stdout: `HOLDING <token>
//! <remaining_ms>` once it holds the lock (or `NOT-ACQUIRED <why>` and exit);
//! `LOST <reason>` when its `lost()` fires; `WRITE <true|false>` (its
//! `is_held()`) once the go file exists; then it releases and prints
//! `RELEASED ok`, `RELEASED lost:<reason>` or `RELEASED error:<text>` and
//! exits. The write itself is made here, in the shared fence, with the
//! child's token: a child cannot reach a fence in this process's memory, and
//! the moment it asks is the moment it would have written.

use super::FaultKind;
use super::history::{Op, Outcome, RenewalMode};
use super::workload::Workload;
use crate::holder::HolderProcess;
use distlock_core::{BoxError, LockKey};
use rand::Rng;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Builds the child's command line for a key, a ttl and the go file.
pub type HolderCommand = Arc<dyn Fn(&LockKey, Duration, &Path) -> Command + Send + Sync>;

/// How long a child may take to start, connect and wait for the lock, beyond
/// its own wait of 4 ttl: process start on a loaded machine.
const START_SLACK: Duration = Duration::from_secs(20);

/// One holder: start it, let it acquire `key`, freeze it past its ttl, wake it,
/// make its write, and record all of it as client `client`.
pub(crate) async fn pause_cycle(
    w: &Workload,
    command: &HolderCommand,
    client: &str,
    key: &LockKey,
) -> Result<(), BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("distlock-chaos-holder-")
        .tempdir()?;
    let go = dir.path().join("go");
    let event = w.recorder.lease_events(client, key);
    let invoked = w.recorder.now();
    let mut child = HolderProcess::spawn(command(key, w.ttl, &go))?;
    let first = child.wait_line("", w.ttl * 4 + START_SLACK).await?;
    // Not acquired within its wait, or it could not connect: no fault here.
    let held = match parse_holding(&first) {
        Some((token, remaining)) => Ok((token, w.recorder.at(Instant::now() + remaining))),
        None if first.starts_with("NOT-ACQUIRED ") => Err(Outcome::NotAcquired),
        None => Err(Outcome::Error(first)),
    };
    let Some(token) = w.record_acquire(&event, RenewalMode::Auto, invoked, held) else {
        return Ok(());
    };

    // The pause: past the ttl, so the lock is free for others meanwhile.
    let length = w.ttl.mul_f64(rand::rng().random_range(1.2..2.0));
    let paused_at = w.recorder.now();
    child.pause()?;
    tokio::time::sleep(length).await;
    child.resume()?;
    let pause = Op::Fault(FaultKind::HolderPause);
    w.recorder
        .record(event(pause, paused_at, None, None, Outcome::Ok));

    // Taken before the go file exists: a `WRITE true` was checked after it.
    let go_at = w.recorder.now();
    std::fs::write(&go, b"")?;
    let limit = w.ttl * 3 + START_SLACK;
    // The holder releases as soon as it printed `WRITE`: the release was sent
    // then, however long its answer takes (a cluster without a leader may
    // take the whole request timeout), and it ends the holder's belief then.
    let mut release_sent = None;
    loop {
        let line = child.wait_line("", limit).await?;
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "LOST" => {
                let at = w.recorder.now();
                w.recorder.record(event(
                    Op::Lost,
                    at,
                    Some(token),
                    None,
                    Outcome::Lost(rest.into()),
                ));
            }
            "WRITE" => {
                release_sent = Some(w.recorder.now());
                let checked = rest == "true";
                let write = Op::Write { checked };
                w.write(event(write, go_at, Some(token), None, Outcome::Ok))
                    .await;
            }
            "RELEASED" => {
                let outcome = match rest.split_once(':') {
                    None if rest == "ok" => Outcome::Ok,
                    Some(("lost", reason)) => Outcome::Lost(reason.into()),
                    _ => Outcome::Error(rest.into()),
                };
                let sent = release_sent.unwrap_or_else(|| w.recorder.now());
                w.recorder
                    .record(event(Op::Release, sent, Some(token), None, outcome));
                return Ok(());
            }
            _ => {
                return Err(format!("the holder printed {line:?}\n{}", child.output_tail()).into());
            }
        }
    }
}

/// `HOLDING <token> <remaining_ms>`.
fn parse_holding(line: &str) -> Option<(u64, Duration)> {
    let mut words = line.strip_prefix("HOLDING ")?.split(' ');
    let token = words.next()?.parse().ok()?;
    let remaining = Duration::from_millis(words.next()?.parse().ok()?);
    Some((token, remaining))
}
