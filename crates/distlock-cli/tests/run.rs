//! `distlock run` on the in-process backend: exit codes, environment, signals.
//! The cross-process cases (busy, contention, loss by deletion) are in
//! `backends.rs`, against real servers.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

mod support;
use std::process::{Command, Output};
use std::time::Duration;
use support::{Running, assert_code, distlock, eventually, output, process_alive, stderr, stdout};

/// `distlock run --url memory:// --key k` and then `rest`.
fn run_k_command(rest: &[&str]) -> Command {
    let mut cmd = distlock();
    cmd.args(["run", "--url", "memory://", "--key", "k"])
        .args(rest);
    cmd
}

/// Runs `distlock run --url memory:// --key k` and then `rest`, to completion.
fn run_k(rest: &[&str]) -> Output {
    output(&mut run_k_command(rest))
}

#[test]
fn exits_with_the_commands_status() {
    assert_code(&run_k(&["--", "true"]), 0);
    assert_code(&run_k(&["--", "sh", "-c", "exit 7"]), 7);
}

#[test]
fn read_and_write_shares_run_the_command_and_exclude_each_other_as_flags() {
    let out = run_k(&[
        "--read",
        "--",
        "sh",
        "-c",
        "echo token=$DISTLOCK_FENCING_TOKEN",
    ]);
    assert_code(&out, 0);
    assert!(stdout(&out).starts_with("token="), "{}", stdout(&out));
    assert_code(&run_k(&["--write", "--", "true"]), 0);
    let out = run_k(&["--read", "--write", "--", "true"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--write"), "{}", stderr(&out));
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_the_signal() {
    let out = run_k(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_code(&out, 128 + 15);
}

#[test]
fn a_missing_or_unexecutable_command_gives_127_or_126() {
    let out = run_k(&["--", "no-such-command-xyz"]);
    assert_code(&out, 127);
    assert!(
        stderr(&out).contains("no-such-command-xyz"),
        "{}",
        stderr(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let out = run_k(&["--", script.to_str().unwrap()]);
    assert_code(&out, 126);
}

#[test]
fn the_command_gets_key_and_token_but_no_url_or_distlock_variable() {
    let out = output(
        distlock()
            .args(["run", "--key", "jobs/nightly", "--", "sh", "-c"])
            .arg("echo \"key=$DISTLOCK_KEY token=$DISTLOCK_FENCING_TOKEN\"; env")
            .env("DISTLOCK_URL", "memory://secret-name")
            .env("DISTLOCK_EXTRA_PASSWORD", "hunter2")
            .env("UNRELATED", "kept"),
    );
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("key=jobs/nightly token="), "{text}");
    let token = text
        .split("token=")
        .nth(1)
        .and_then(|t| t.lines().next())
        .unwrap();
    assert!(token.parse::<u64>().is_ok(), "token {token:?}");
    assert!(text.contains("UNRELATED=kept"), "{text}");
    for leaked in ["DISTLOCK_URL", "secret-name", "hunter2"] {
        assert!(
            !text.contains(leaked),
            "{leaked} reached the command:\n{text}"
        );
    }
}

#[test]
fn lost_lease_terminates_the_process_group_then_kills_it_and_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    // The command and its grandchild ignore SIGTERM: only SIGKILL after
    // --kill-after stops them.
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > {}; echo ready; wait",
        pid_file.display()
    );
    let mut running = Running::start(&mut run_k_command(&[
        "--max-hold",
        "1s",
        "--kill-after",
        "300ms",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    running.wait_line("ready", Duration::from_secs(10));
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_alive(grandchild));
    let (status, err) = running.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(69), "{err}");
    assert!(
        err.contains("lost") && err.contains("SIGKILL after 300ms"),
        "{err}"
    );
    assert!(
        eventually(Duration::from_secs(5), || !process_alive(grandchild)),
        "the grandchild {grandchild} outlived the lost lock"
    );
}

#[test]
fn a_command_that_stops_on_sigterm_exits_before_the_kill() {
    let out = run_k(&[
        "--max-hold",
        "500ms",
        "--kill-after",
        "30s",
        "--",
        "sleep",
        "60",
    ]);
    // Lost is reported whatever status the stopped command had.
    assert_code(&out, 69);
}

#[test]
fn sigterm_and_sigint_are_forwarded_to_the_command() {
    for (signal, code) in [("TERM", 42), ("INT", 43)] {
        let script =
            "trap 'exit 42' TERM; trap 'exit 43' INT; echo ready; while :; do sleep 0.05; done";
        let mut running = Running::start(&mut run_k_command(&["--", "sh", "-c", script]));
        running.wait_line("ready", Duration::from_secs(10));
        running.signal(signal);
        let (status, err) = running.wait(Duration::from_secs(20));
        assert_eq!(status.code(), Some(code), "SIG{signal}: {err}");
    }
}
