//! `distlock run --at-least`: a job that exits at once still keeps the lock
//! for the period, so a second run right after it finds the lock held, on
//! real servers; a backend that cannot keep a lock past its holder refuses
//! the flag with the reason.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
use std::process::Output;
use std::time::{Duration, Instant};
#[allow(unused_imports)]
use support::servers;
use support::{assert_code, distlock, output, stderr};

/// The period of the runs below: long enough that two runs back to back on a
/// busy machine both fall within it.
const PERIOD: Duration = Duration::from_secs(6);

/// A key no other test or run uses.
fn fresh_key(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("cli-test/{nanos:08x}/{what}")
}

/// `distlock run --no-wait --at-least 6s --url URL --key KEY -- true`.
fn once_per_period(url: &str, key: &str) -> Output {
    output(distlock().args([
        "run",
        "--url",
        url,
        "--key",
        key,
        "--no-wait",
        "--at-least",
        "6s",
        "--",
        "true",
    ]))
}

/// Two runs back to back: the first runs its job (which exits at once), the
/// second finds the lock held (exit 75); once the period has passed since
/// the first run began, a third runs again.
pub fn a_job_runs_at_most_once_per_period(url: &str) {
    let key = fresh_key("at-least");
    let started = Instant::now();
    assert_code(&once_per_period(url, &key), 0);
    let second = once_per_period(url, &key);
    assert!(
        started.elapsed() < PERIOD,
        "the two runs took {:?}, longer than the period",
        started.elapsed()
    );
    assert_code(&second, 75);
    assert!(stderr(&second).contains(&key), "{}", stderr(&second));
    // The server frees the lock by itself at the end of the period.
    let next = output(distlock().args([
        "run", "--url", url, "--key", &key, "--wait", "30s", "--", "true",
    ]));
    assert_code(&next, 0);
    assert!(
        started.elapsed() >= PERIOD,
        "the lock freed {:?} after the first run began, before its period",
        started.elapsed()
    );
}

/// A session-bound strategy cannot keep a lock past its holder: the flag is
/// refused (exit 2) with the reason and the strategy to use instead.
pub fn at_least_is_refused_with_the_reason(url: &str) {
    let out = once_per_period(url, &fresh_key("refused"));
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("min_hold") && err.contains("version_cas"),
        "{err}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_a_job_runs_at_most_once_per_period() {
    a_job_runs_at_most_once_per_period(&servers::redis_url());
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_a_job_runs_at_most_once_per_period() {
    a_job_runs_at_most_once_per_period(&servers::postgres_url());
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_a_job_runs_at_most_once_per_period() {
    a_job_runs_at_most_once_per_period(&servers::mysql_url());
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_advisory_refuses_at_least() {
    at_least_is_refused_with_the_reason(&servers::postgres_advisory_url());
}
