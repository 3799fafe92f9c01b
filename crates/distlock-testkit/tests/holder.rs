//! The holder helper runs, freezes, resumes and kills a child that holds a lock.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::holder::HolderProcess;
use std::process::Command;
use std::time::Duration;

/// The state letter in `/proc/<pid>/stat` (`T` when stopped), or `None` once the
/// process no longer exists.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may hold spaces: the state follows it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

async fn wait_for_state(pid: u32, wanted: impl Fn(Option<char>) -> bool) -> Option<char> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let state = proc_state(pid);
        if wanted(state) || tokio::time::Instant::now() >= deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn holding_sleeper(token: u64) -> Command {
    let mut command = Command::new("sh");
    command.args([
        "-c",
        &format!("echo starting; echo HOLDING {token}; exec sleep 30"),
    ]);
    command
}

#[tokio::test]
async fn holder_reports_token_and_obeys_pause_resume_kill() {
    let mut holder = HolderProcess::spawn(holding_sleeper(42)).unwrap();
    let token = holder.wait_holding(Duration::from_secs(10)).await.unwrap();
    assert_eq!(token, 42);
    let pid = holder.pid();
    assert!(holder.is_running());

    holder.pause().unwrap();
    assert_eq!(wait_for_state(pid, |s| s == Some('T')).await, Some('T'));

    holder.resume().unwrap();
    let state = wait_for_state(pid, |s| s.is_some_and(|s| s != 'T')).await;
    assert!(
        matches!(state, Some(s) if s != 'T'),
        "state after resume: {state:?}"
    );

    holder.kill();
    assert!(!holder.is_running());
    assert_eq!(proc_state(pid), None, "killed holder must be reaped");
}

#[tokio::test]
async fn dropping_a_holder_kills_it() {
    let mut holder = HolderProcess::spawn(holding_sleeper(7)).unwrap();
    assert_eq!(
        holder.wait_holding(Duration::from_secs(10)).await.unwrap(),
        7
    );
    let pid = holder.pid();
    holder.pause().unwrap();
    drop(holder);
    assert_eq!(
        proc_state(pid),
        None,
        "dropped holder must be killed and reaped"
    );
}

#[tokio::test]
async fn holder_that_exits_before_holding_is_an_error_with_its_output() {
    let mut command = Command::new("sh");
    command.args(["-c", "echo cannot-connect >&2; exit 3"]);
    let mut holder = HolderProcess::spawn(command).unwrap();
    let error = holder
        .wait_holding(Duration::from_secs(10))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("cannot-connect"), "{error}");
    assert!(error.contains("exit status: 3"), "{error}");
}

#[tokio::test]
async fn holder_that_never_holds_times_out() {
    let mut command = Command::new("sleep");
    command.arg("30");
    let mut holder = HolderProcess::spawn(command).unwrap();
    let started = tokio::time::Instant::now();
    let error = holder
        .wait_holding(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(error.to_string().contains("not ready"), "{error}");
    assert!(holder.is_running());
}

#[tokio::test]
async fn malformed_holding_line_is_an_error() {
    let mut command = Command::new("sh");
    command.args(["-c", "echo HOLDING not-a-number; exec sleep 30"]);
    let mut holder = HolderProcess::spawn(command).unwrap();
    let error = holder
        .wait_holding(Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("malformed"), "{error}");
}
