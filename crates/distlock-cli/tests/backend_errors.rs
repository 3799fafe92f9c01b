//! Bad backend URLs exit 2 with the reason; unreachable backends exit 1 naming
//! the address. Neither ever shows the password.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;
use support::{assert_code, run, stderr};

const SECRET: &str = "sekret-pw-123";

fn run_with(url: &str) -> std::process::Output {
    run(&["run", "--url", url, "--key", "k", "--no-wait", "--", "true"])
}

/// Exit `code`, every needle in stderr, and no password.
fn fails(url: &str, code: i32, needles: &[&str]) {
    let out = run_with(url);
    assert_code(&out, code);
    let err = stderr(&out);
    assert!(!err.contains(SECRET), "password shown for {url}:\n{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} missing for {url}:\n{err}");
    }
}

#[cfg(feature = "redis")]
#[test]
fn redis_bad_urls_and_unreachable_server() {
    fails(&format!("redis://:{SECRET}@127.0.0.1:99999"), 2, &["redis"]);
    fails(
        &format!("redis://:{SECRET}@127.0.0.1:6379/x"),
        2,
        &["database"],
    );
    fails(
        &format!("redis://:{SECRET}@127.0.0.1:1/0?connect_timeout=2s"),
        1,
        &["127.0.0.1:1"],
    );
}

#[cfg(feature = "redlock")]
#[test]
fn redlock_bad_urls_and_unreachable_servers() {
    fails("redlock://", 2, &["redlock"]);
    fails(
        &format!("redlock://:{SECRET}@127.0.0.1:99999,127.0.0.1:2,127.0.0.1:3"),
        2,
        &["redlock"],
    );
    fails(
        &format!("redlock://:{SECRET}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?connect_timeout=2s"),
        1,
        &["127.0.0.1"],
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_bad_urls_and_unreachable_server() {
    fails(&format!("etcd://u:{SECRET}@127.0.0.1:99999"), 2, &["etcd"]);
    fails(
        &format!("etcd://u:{SECRET}@127.0.0.1:1?connect_timeout=2s"),
        1,
        &["127.0.0.1:1"],
    );
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_bad_urls_and_unreachable_server() {
    fails(
        &format!("zk://u:{SECRET}@127.0.0.1:99999"),
        2,
        &["zookeeper"],
    );
    fails(
        &format!("zk://u:{SECRET}@127.0.0.1:1?connect_timeout=2s"),
        1,
        &["127.0.0.1:1"],
    );
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_bad_urls_and_unreachable_server() {
    fails(
        &format!("mysql://u:{SECRET}@127.0.0.1:99999/db"),
        2,
        &["mysql"],
    );
    fails(
        &format!("mysql://u:{SECRET}@127.0.0.1:3306/db?table=locks;DROP%20TABLE%20users"),
        2,
        &["table"],
    );
    fails(
        &format!("mysql://u:{SECRET}@127.0.0.1:3306/db?strategy=fastest"),
        2,
        &["strategy"],
    );
    fails(
        &format!("mysql://u:{SECRET}@127.0.0.1:1/db?connect_timeout=2s"),
        1,
        &["127.0.0.1:1"],
    );
}
