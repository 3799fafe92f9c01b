//! `rediss://` and `redlocks://` against redis-server speaking TLS with a CA made
//! at test time: locks work with the right CA (and client certificate), and a
//! client that does not trust the server, or lacks the certificate the server
//! asks for, gets a Config error that names TLS and shows no secret.
#![cfg(feature = "tls")]
// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::servers;
use distlock_core::LockError;
use distlock_redis::{RedisConfig, RedlockConfig};
use distlock_testkit::servers::{RedisOptions, RedisServer, ServerTls, TestCertificates};

const PASSWORD: &str = "tls-s3cret-pw";

async fn tls_server(tls: &ServerTls) -> RedisServer {
    let options = RedisOptions {
        password: Some(PASSWORD.into()),
        tls: Some(tls.clone()),
        ..RedisOptions::default()
    };
    servers(1, options).await.pop().expect("one server")
}

/// The server's `rediss://` URL with `params` appended.
fn url(server: &RedisServer, params: &str) -> String {
    format!("{}?{params}", server.tls_url().expect("started with TLS"))
}

fn ca_param(certs: &TestCertificates) -> String {
    format!("ca={}", certs.ca().display())
}

fn identity_params(certs: &TestCertificates) -> String {
    format!(
        "cert={}&key={}",
        certs.client_cert().display(),
        certs.client_key().display()
    )
}

/// The connect error, which must be a Config error naming TLS and holding no
/// password and no key material.
async fn refused(url: &str) -> String {
    let result = RedisConfig::from_url(url).unwrap().connect().await;
    let reason = match result {
        Err(LockError::Config { reason, .. }) => reason,
        Err(other) => panic!("expected a Config error, got {other:?}"),
        Ok(_) => panic!("{url}: connected although TLS should have failed"),
    };
    assert!(reason.contains("TLS"), "{reason}");
    assert!(!reason.contains(PASSWORD), "{reason}");
    assert!(!reason.contains("PRIVATE KEY"), "{reason}");
    reason
}

#[tokio::test]
async fn locks_work_over_tls_with_the_test_ca() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let lock = RedisConfig::from_url(&url(&server, &ca_param(&tls.certificates)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "tls/one")
        .await
        .unwrap();
    // The same through the builder, with the CA given as PEM.
    let pem = std::fs::read(tls.certificates.ca()).unwrap();
    let lock = RedisConfig::new("127.0.0.1", server.tls_port().unwrap())
        .credentials(None, PASSWORD)
        .tls(true)
        .tls_ca_certificate(pem)
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "tls/builder")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_server_is_refused() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let stranger = TestCertificates::generate().unwrap();
    let reason = refused(&url(&server, &ca_param(&stranger))).await;
    assert!(
        reason.contains("ca="),
        "the hint names the parameter: {reason}"
    );
    // Without ca= the system roots are trusted, and they do not know the test CA.
    let bare = server.tls_url().unwrap();
    refused(&bare).await;
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_refuses_a_client_without_one() {
    let tls = ServerTls::mutual().unwrap();
    let server = tls_server(&tls).await;
    let certs = &tls.certificates;
    let reason = refused(&url(&server, &ca_param(certs))).await;
    assert!(
        reason.contains("cert="),
        "the hint names the parameter: {reason}"
    );
    let with_identity = url(
        &server,
        &format!("{}&{}", ca_param(certs), identity_params(certs)),
    );
    let lock = RedisConfig::from_url(&with_identity)
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "tls/mutual")
        .await
        .unwrap();
}

#[tokio::test]
async fn redlock_works_over_tls_on_every_node() {
    let tls = ServerTls::mutual().unwrap();
    let options = RedisOptions {
        tls: Some(tls.clone()),
        ..RedisOptions::default()
    };
    let nodes = servers(3, options).await;
    let hosts: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.tls_port().unwrap()))
        .collect();
    let certs = &tls.certificates;
    let url = format!(
        "redlocks://{}?{}&{}",
        hosts.join(","),
        ca_param(certs),
        identity_params(certs)
    );
    let lock = RedlockConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "tls/redlock")
        .await
        .unwrap();
}

#[test]
fn tls_files_are_checked_when_the_url_is_parsed() {
    let certs = TestCertificates::generate().unwrap();
    let reason = |url: &str| match RedisConfig::from_url(url) {
        Err(LockError::Config { reason, .. }) => reason,
        other => panic!("{url}: expected a Config error, got {other:?}"),
    };
    let ca = ca_param(&certs);
    let plain = reason(&format!("redis://:{PASSWORD}@h/0?{ca}"));
    assert!(plain.contains("needs rediss://"), "{plain}");
    let missing = reason("rediss://h/0?ca=/nonexistent/ca.pem");
    assert!(
        missing.contains("`ca`") && missing.contains("/nonexistent/ca.pem"),
        "{missing}"
    );
    let half = reason(&format!(
        "rediss://:{PASSWORD}@h/0?cert={}",
        certs.client_cert().display()
    ));
    assert!(half.contains("needs its key"), "{half}");
    assert!(!half.contains(PASSWORD), "{half}");
    // The client key's contents never reach Debug.
    let config =
        RedisConfig::from_url(&format!("rediss://h/0?{ca}&{}", identity_params(&certs))).unwrap();
    let key = std::fs::read_to_string(certs.client_key()).unwrap();
    let debug = format!("{config:?}");
    assert!(
        !debug.contains(key.trim()) && !debug.contains("PRIVATE KEY"),
        "{debug}"
    );
}
