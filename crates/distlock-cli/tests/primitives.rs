//! `distlock run --permits N` and `distlock elect`: the child's environment,
//! exit codes, and (against a real Redis) a second candidate that takes over
//! when the leader's command ends.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
use std::time::Duration;
#[allow(unused_imports)]
use support::servers;
use support::{Running, assert_code, distlock, output, stderr, stdout};

/// The value of `name=` in `text`, as printed by `echo name=$VAR`.
fn field(text: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    text.split_whitespace()
        .find_map(|word| word.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name}= in {text:?}"))
        .to_owned()
}

#[test]
fn a_permit_gives_the_command_its_slot_and_token() {
    let out = output(
        distlock()
            .args([
                "run",
                "--url",
                "memory://",
                "--key",
                "workers",
                "--permits",
                "4",
            ])
            .args(["--", "sh", "-c"])
            .arg("echo slot=$DISTLOCK_SLOT token=$DISTLOCK_FENCING_TOKEN key=$DISTLOCK_KEY"),
    );
    assert_code(&out, 0);
    let text = stdout(&out);
    assert_eq!(field(&text, "slot"), "0");
    assert_eq!(field(&text, "key"), "workers");
    assert!(field(&text, "token").parse::<u64>().is_ok(), "{text}");
}

#[test]
fn a_lock_run_has_no_slot() {
    let out = output(
        distlock()
            .args(["run", "--url", "memory://", "--key", "k", "--", "sh", "-c"])
            .arg("echo slot=${DISTLOCK_SLOT:-none}"),
    );
    assert_code(&out, 0);
    assert_eq!(field(&stdout(&out), "slot"), "none");
}

#[test]
fn permits_out_of_range_are_a_usage_error() {
    for bad in ["0", "-1", "many", "4097"] {
        let out = output(
            distlock()
                .args(["run", "--url", "memory://", "--key", "k", "--permits", bad])
                .args(["--", "true"]),
        );
        assert_code(&out, 2);
        assert!(stderr(&out).contains("permits"), "{bad}: {}", stderr(&out));
    }
}

#[test]
fn elect_runs_the_command_as_leader_with_its_term() {
    let out = output(
        distlock()
            .args(["elect", "--url", "memory://", "--key", "scheduler", "--"])
            .args(["sh", "-c", "echo term=$DISTLOCK_FENCING_TOKEN; exit 3"]),
    );
    assert_code(&out, 3);
    assert!(
        field(&stdout(&out), "term").parse::<u64>().is_ok(),
        "{}",
        stdout(&out)
    );
}

/// Two `distlock elect` processes on one Redis: the second waits while the
/// first leads, is refused with `--no-wait` (75), and leads with a higher term
/// once the first's command ends; `elect --observe` prints both leaders in
/// turn and the vacancy after them, and ends on Ctrl-C.
#[cfg(feature = "redis")]
#[test]
fn redis_a_second_candidate_leads_after_the_first() {
    let url = servers::redis_url();
    let key = format!("cli-test/elect-{}", std::process::id());
    let elect = |flags: &[&str], script: &str| {
        let mut cmd = distlock();
        cmd.args(["elect", "--url", &url, "--key", &key, "--ttl", "5s"])
            .args(flags)
            .args(["--", "sh", "-c", script]);
        cmd
    };
    let mut observer = Running::start(distlock().args(["elect", "--url", &url, "--observe", &key]));
    observer.wait_line("vacant", Duration::from_secs(30));
    let go = tempfile::tempdir().unwrap();
    let go_file = go.path().join("go");
    let first_script = format!(
        "echo term=$DISTLOCK_FENCING_TOKEN; while [ ! -e {} ]; do sleep 0.05; done",
        go_file.display()
    );
    let mut first = Running::start(&mut elect(&[], &first_script));
    let first_term = field(&first.wait_line("term=", Duration::from_secs(30)), "term");

    let busy = output(&mut elect(&["--no-wait"], "true"));
    assert_code(&busy, 75);

    let second_go = go.path().join("second-go");
    let second_script = format!(
        "echo term=$DISTLOCK_FENCING_TOKEN; while [ ! -e {} ]; do sleep 0.05; done",
        second_go.display()
    );
    let mut second = Running::start(&mut elect(&[], &second_script));
    assert!(
        !second.saw_line_within("term=", Duration::from_millis(500)),
        "a second leader while the first leads"
    );
    std::fs::write(&go_file, b"").unwrap();
    let (status, err) = first.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{err}");
    let second_term = field(&second.wait_line("term=", Duration::from_secs(10)), "term");
    assert!(
        second_term.parse::<u64>().unwrap() > first_term.parse::<u64>().unwrap(),
        "term {second_term} after {first_term}"
    );
    // The observer printed each leader in turn, then the vacancy.
    observer.wait_line(
        &format!("leader term={first_term} "),
        Duration::from_secs(5),
    );
    observer.wait_line(
        &format!("leader term={second_term} "),
        Duration::from_secs(5),
    );
    std::fs::write(&second_go, b"").unwrap();
    let (status, err) = second.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{err}");
    observer.wait_line("vacant", Duration::from_secs(5));
    observer.signal("INT");
    let (status, err) = observer.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{err}");
}

/// A backend without semaphores says so, with exit 2.
#[cfg(feature = "redlock")]
#[test]
fn redlock_permits_without_a_semaphore_is_a_configuration_error() {
    let out = output(
        distlock()
            .args([
                "run",
                "--url",
                &servers::redlock_url(),
                "--key",
                "k",
                "--permits",
                "2",
            ])
            .args(["--", "true"]),
    );
    assert_code(&out, 2);
    assert!(stderr(&out).contains("no semaphore"), "{}", stderr(&out));
}

/// On Redis a permit gives the command its slot and token too.
#[cfg(feature = "redis")]
#[test]
fn redis_a_permit_gives_the_command_its_slot_and_token() {
    let key = format!("cli-permit-{}", std::process::id());
    let out = output(
        distlock()
            .args(["run", "--url", &servers::redis_url(), "--key", &key])
            .args(["--permits", "3", "--", "sh", "-c"])
            .arg("echo slot=$DISTLOCK_SLOT token=$DISTLOCK_FENCING_TOKEN"),
    );
    assert_code(&out, 0);
    let text = stdout(&out);
    assert_eq!(field(&text, "slot"), "0");
    assert!(field(&text, "token").parse::<u64>().is_ok(), "{text}");
}
