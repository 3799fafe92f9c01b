//! `distlock run` over TLS: the default build (feature `full`, which includes
//! `tls`) holds a lock over `rediss://` and `etcds://` with a CA made at test
//! time, and a URL whose CA does not match the server exits 2 with an error
//! that names TLS and shows no password.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point
#![cfg_attr(not(feature = "full"), allow(dead_code, unused_imports))]

mod support;

use distlock_testkit::servers::{RedisOptions, RedisServer, ServerTls, TestCertificates};
use support::{assert_code, run, stderr, stdout};

const PASSWORD: &str = "cli-tls-s3cret";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("a tokio runtime for the launchers")
}

fn redis_with_tls(rt: &tokio::runtime::Runtime, tls: &ServerTls) -> RedisServer {
    let options = RedisOptions {
        password: Some(PASSWORD.into()),
        tls: Some(tls.clone()),
        ..RedisOptions::default()
    };
    rt.block_on(RedisServer::start_with(options))
        .unwrap_or_else(|e| panic!("cannot start redis-server with TLS: {e}"))
}

/// `distlock run --url URL --key KEY -- sh -c 'echo token=$DISTLOCK_FENCING_TOKEN'`.
fn run_printing_the_token(url: &str, key: &str) -> std::process::Output {
    let script = "echo token=$DISTLOCK_FENCING_TOKEN";
    run(&["run", "--url", url, "--key", key, "--", "sh", "-c", script])
}

#[cfg(feature = "redis")]
#[test]
fn run_holds_a_lock_over_rediss() {
    let tls = ServerTls::generate().unwrap();
    let rt = runtime();
    let server = redis_with_tls(&rt, &tls);
    let url = format!(
        "{}?ca={}",
        server.tls_url().unwrap(),
        tls.certificates.ca().display()
    );
    assert_code(
        &run(&["run", "--url", &url, "--key", "cli-tls/k", "--", "true"]),
        0,
    );
    let out = run_printing_the_token(&url, "cli-tls/token");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("token="), "{}", stdout(&out));
}

#[cfg(feature = "redis")]
#[test]
fn run_with_a_ca_that_does_not_match_exits_2_naming_tls() {
    let tls = ServerTls::generate().unwrap();
    let rt = runtime();
    let server = redis_with_tls(&rt, &tls);
    let stranger = TestCertificates::generate().unwrap();
    let url = format!(
        "{}?ca={}",
        server.tls_url().unwrap(),
        stranger.ca().display()
    );
    let out = run(&["run", "--url", &url, "--key", "cli-tls/k", "--", "true"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("TLS"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");
}

#[cfg(all(feature = "etcd", feature = "tls"))]
#[test]
fn run_holds_a_lock_over_etcds() {
    let tls = ServerTls::generate().unwrap();
    let rt = runtime();
    let server = rt
        .block_on(distlock_testkit::servers::EtcdServer::start_tls(&tls))
        .unwrap_or_else(|e| panic!("cannot start etcd with TLS: {e}"));
    let url = format!(
        "etcds://127.0.0.1:{}/cli-tls/?ca={}",
        server.tls_port().unwrap(),
        tls.certificates.ca().display()
    );
    let out = run_printing_the_token(&url, "cli-tls/etcd");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("token="), "{}", stdout(&out));
}
