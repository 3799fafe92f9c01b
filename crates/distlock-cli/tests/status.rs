//! `distlock status` and `distlock unlock --force`: a held key shows its holder
//! and token, a force-unlock frees it and stops the `distlock run` that held it
//! (exit 69), and an unlock without `--force` is refused (exit 2) and changes
//! nothing.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
use std::time::Duration;
#[allow(unused_imports)]
use support::servers;
use support::{Running, assert_code, distlock, run, stderr, stdout};

/// A key no other test or run uses.
fn fresh_key(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("cli-status/{nanos:08x}-{}/{what}", std::process::id())
}

fn status(url: &str, key: &str) -> std::process::Output {
    run(&["status", "--url", url, "--key", key])
}

#[test]
fn memory_status_of_a_free_key_exits_0() {
    let out = status("memory://status", "jobs/nightly");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("`jobs/nightly` is free"),
        "{}",
        stdout(&out)
    );
    // Another process's memory:// locks are never visible: say so.
    assert!(stderr(&out).contains("one process"), "{}", stderr(&out));
}

#[test]
fn unlock_without_force_exits_2_saying_why() {
    let out = run(&["unlock", "--url", "memory://status", "--key", "k"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    for needle in ["--force", "keeps running", "fencing"] {
        assert!(err.contains(needle), "{needle:?} missing:\n{err}");
    }
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[test]
fn unlock_force_of_a_free_key_deletes_nothing() {
    let out = run(&[
        "unlock",
        "--url",
        "memory://status",
        "--key",
        "k",
        "--force",
    ]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("was not held; nothing deleted"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn status_usage_errors_exit_2() {
    assert_code(&run(&["status", "--url", "memory://status"]), 2);
    assert_code(&run(&["status", "--key", "k"]), 2);
    assert_code(&run(&["status", "--url", "memory://x", "--key", ""]), 2);
}

/// A held key shows its owner, host and pid, the holder's token and a ttl; an unlock without
/// `--force` leaves it held; `unlock --force` frees it, the `distlock run`
/// that held it exits 69, and the key shows free.
pub fn held_key_shows_token_and_force_unlock_stops_the_holder(url: &str) {
    let key = fresh_key("held");
    let mut holder = Running::start(distlock().args([
        "run",
        "--url",
        url,
        "--key",
        &key,
        "--ttl",
        "3s",
        "--",
        "sh",
        "-c",
        "echo holding $DISTLOCK_FENCING_TOKEN; sleep 60",
    ]));
    let line = holder.wait_line("holding", Duration::from_secs(30));
    let token = line.trim_start_matches("holding").trim().to_owned();
    assert!(!token.is_empty(), "no token in {line:?}");

    let out = status(url, &key);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains(&format!("`{key}` is held")), "{text}");
    assert!(text.contains(&format!("token: {token}\n")), "{text}");
    assert!(text.contains("owner: "), "{text}");
    // The `distlock run` process recorded itself as the holder.
    let pid = format!("pid: {}\n", holder.child.id());
    assert!(text.contains(&pid) && text.contains("host: "), "{text}");
    assert!(text.contains("ttl left: "), "{text}");

    let refused = run(&["unlock", "--url", url, "--key", &key]);
    assert_code(&refused, 2);
    let still = stdout(&status(url, &key));
    assert!(
        still.contains("is held"),
        "held no more after a refused unlock:\n{still}"
    );

    let out = run(&["unlock", "--url", url, "--key", &key, "--force"]);
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("deleted the holder"), "{text}");
    assert!(text.contains(&format!("token: {token}\n")), "{text}");
    assert!(stderr(&out).contains("warning"), "{}", stderr(&out));

    let (exit, err) = holder.wait(Duration::from_secs(30));
    assert_eq!(exit.code(), Some(69), "{err}");
    assert!(err.contains("lost"), "{err}");
    let after = stdout(&status(url, &key));
    assert!(after.contains("is free"), "{after}");
}

macro_rules! against {
    ($backend:ident, $feature:literal, $url:ident) => {
        #[cfg(feature = $feature)]
        mod $backend {
            #[test]
            fn held_key_shows_token_and_force_unlock_stops_the_holder() {
                super::held_key_shows_token_and_force_unlock_stops_the_holder(
                    &super::servers::$url(),
                );
            }
        }
    };
}

against!(redis, "redis", redis_url);
against!(redlock, "redlock", redlock_url);
against!(etcd, "etcd", etcd_url);
against!(zookeeper, "zookeeper", zookeeper_url);
against!(mysql, "mysql", mysql_url);

/// An unreachable backend is exit 1, for both commands.
#[cfg(feature = "redis")]
#[test]
fn unreachable_backend_exits_1() {
    let url = "redis://127.0.0.1:1/0?connect_timeout=2s";
    assert_code(&status(url, "k"), 1);
    assert_code(&run(&["unlock", "--url", url, "--key", "k", "--force"]), 1);
}
