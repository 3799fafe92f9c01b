//! Every bad input gives exit 2 and a message that says what is wrong, never a panic.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

mod support;
use support::{assert_code, run, stderr};

/// Runs `distlock run` with `args` before `-- true` and expects exit 2 with
/// every `needles` in stderr.
fn refused(args: &[&str], needles: &[&str]) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let out = run(&all);
    assert_code(&out, 2);
    let err = stderr(&out);
    for needle in needles {
        assert!(
            err.contains(needle),
            "{needle:?} not in stderr of {args:?}:\n{err}"
        );
    }
}

#[test]
fn unknown_scheme() {
    refused(
        &["--url", "cockroach://db", "--key", "k"],
        &["unknown scheme `cockroach://`", "redis://", "postgres://"],
    );
}

#[test]
fn url_without_scheme() {
    refused(&["--url", "localhost:6379", "--key", "k"], &["SCHEME://"]);
}

#[test]
fn missing_url() {
    refused(&["--key", "k"], &["--url", "DISTLOCK_URL"]);
}

#[test]
fn empty_key() {
    refused(&["--url", "memory://", "--key", ""], &["--key", "empty"]);
}

#[test]
fn key_over_512_bytes() {
    let key = "k".repeat(513);
    refused(
        &["--url", "memory://", "--key", &key],
        &["513 bytes", "512"],
    );
}

#[test]
fn a_huge_key_is_named_by_length_not_echoed() {
    let key = "k".repeat(120_000);
    let out = run(&["run", "--url", "memory://", "--key", &key, "--", "true"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("120000 bytes"), "{err}");
    assert!(
        err.len() < 1_000,
        "stderr echoes the key: {} bytes",
        err.len()
    );
}

#[test]
fn an_unwritable_plot_path_is_refused_before_the_benchmark_runs() {
    // Run to completion, the benchmark would take its minute and then fail to
    // write with exit 1; checked up front it is a usage error at once.
    for path in ["/", "/nonexistent-dir/chart.svg"] {
        let out = run(&[
            "bench",
            "--url",
            "memory://",
            "--duration",
            "60s",
            "--plot",
            path,
        ]);
        assert_code(&out, 2);
        let err = stderr(&out);
        assert!(err.contains("--plot"), "{path}: {err}");
    }
}

#[test]
fn key_with_control_character() {
    refused(
        &["--url", "memory://", "--key", "a\tb"],
        &["control character"],
    );
}

#[test]
fn zero_ttl() {
    refused(
        &["--url", "memory://", "--key", "k", "--ttl", "0s"],
        &["--ttl", "zero"],
    );
}

#[test]
fn unparsable_ttl() {
    refused(
        &["--url", "memory://", "--key", "k", "--ttl", "soon"],
        &["--ttl", "not a duration"],
    );
    refused(
        &["--url", "memory://", "--key", "k", "--ttl", "-5s"],
        &["--ttl"],
    );
}

#[test]
fn unparsable_wait_and_kill_after() {
    refused(
        &["--url", "memory://", "--key", "k", "--wait", "10 parsecs"],
        &["--wait"],
    );
    refused(
        &["--url", "memory://", "--key", "k", "--kill-after", "x"],
        &["--kill-after"],
    );
}

#[test]
fn wait_and_no_wait_together() {
    refused(
        &[
            "--url",
            "memory://",
            "--key",
            "k",
            "--wait",
            "1s",
            "--no-wait",
        ],
        &["--no-wait"],
    );
}

#[test]
fn memory_url_with_a_path() {
    refused(&["--url", "memory://a/b", "--key", "k"], &["memory://NAME"]);
}

#[test]
fn missing_command() {
    let out = run(&["run", "--url", "memory://", "--key", "k"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("<CMD>"), "{}", stderr(&out));
    let out = run(&["run", "--url", "memory://", "--key", "k", "--"]);
    assert_code(&out, 2);
}

#[test]
fn unknown_subcommand_and_flag() {
    assert_code(&run(&["lock"]), 2);
    assert_code(
        &run(&[
            "run",
            "--colour",
            "--url",
            "memory://",
            "--key",
            "k",
            "--",
            "true",
        ]),
        2,
    );
}

#[test]
fn bench_and_check_refuse_bad_values() {
    for args in [
        &["bench", "--url", "memory://", "--duration", "0s"][..],
        &["bench", "--url", "memory://", "--clients", "0"],
        &["bench", "--url", "memory://", "--keys", "0"],
        &["bench", "--url", "nope://x"],
        &["check", "--url", "nope://x"],
        &["check"],
        &["demo", "--buyers", "0"],
        &["demo", "--url", "nope://x"],
    ] {
        let out = run(args);
        assert_code(&out, 2);
        assert!(!stderr(&out).is_empty(), "{args:?} printed no reason");
    }
}

#[test]
fn help_and_version_exit_zero() {
    assert_code(&run(&["--help"]), 0);
    assert_code(&run(&["run", "--help"]), 0);
    assert_code(&run(&["--version"]), 0);
}

/// A URL that missed its `--url` is quoted by clap's "unexpected argument"
/// message: forgotten `--url`, a value starting with `-` (so clap takes it for
/// a flag), `--url=…` after `--`. Exit 2, and the password is never shown, in
/// plain or in coloured output.
#[test]
fn a_url_clap_did_not_take_never_shows_its_password() {
    const SECRET: &str = "longpassword";
    for args in [
        &["check", "redis://:longpassword@cache:6379"][..],
        &["check", "--url", "--redis://u:longpassword@cache/"],
        &["check", "--url", "-redis://u:longpassword@cache/"],
        &["--", "--url=etcd://u:longpassword@h/e"],
        &["check", "--", "--url=zk://u:longpassword@h"],
    ] {
        for colour in [None, Some("1")] {
            let mut cmd = support::distlock();
            cmd.args(args);
            // anstream's override of its terminal check, as for clap itself;
            // the caller's colour settings must not decide the case.
            cmd.env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
            if let Some(force) = colour {
                cmd.env("CLICOLOR_FORCE", force);
            }
            let out = support::output(&mut cmd);
            assert_code(&out, 2);
            let (err, shown) = (stderr(&out), support::stdout(&out));
            assert!(err.contains("error:"), "{args:?}: {err}");
            assert!(
                !err.contains(SECRET) && !shown.contains(SECRET),
                "{args:?} shows the password:\n{err}{shown}"
            );
            // clap's colouring decision is kept: styles only when forced (stderr
            // is a pipe here).
            assert_eq!(err.contains('\x1b'), colour.is_some(), "{args:?}: {err:?}");
        }
    }
}
