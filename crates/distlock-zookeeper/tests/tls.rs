//! `zk://…?tls=true&ca=…` against ZooKeeper's `secureClientPort` (Netty, PEM
//! key and trust stores from a CA made at test time): locks work with the right
//! CA (and client certificate); a client that does not trust the server, or
//! lacks the certificate the server asks for, gets a clear error naming TLS
//! within the connect timeout, never a panic or a secret.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use distlock_core::LockError;
use distlock_testkit::servers::{ServerTls, TestCertificates, ZooKeeperOptions, ZooKeeperServer};
use distlock_zookeeper::{ZkConfig, ZkTls};
use std::time::{Duration, Instant};

async fn tls_server(tls: &ServerTls) -> ZooKeeperServer {
    common::dedicated_server(ZooKeeperOptions {
        tls: Some(tls.clone()),
        ..ZooKeeperOptions::default()
    })
    .await
}

fn url(server: &ZooKeeperServer, params: &str) -> String {
    let port = server.tls_port().expect("started with TLS");
    format!(
        "zk://127.0.0.1:{port}?namespace={}&connect_timeout=3s&tls=true&{params}",
        common::namespace("tls")
    )
}

fn ca_param(certs: &TestCertificates) -> String {
    format!("ca={}", certs.ca().display())
}

/// The connect error: Config or Unavailable naming TLS, without key material,
/// within the connect timeout (3 s) and some slack.
async fn refused(url: &str) -> String {
    let started = Instant::now();
    let message = match ZkConfig::from_url(url).unwrap().connect().await {
        Err(e @ (LockError::Config { .. } | LockError::Unavailable { .. })) => e.to_string(),
        Err(other) => panic!("expected Config or Unavailable, got {other:?}"),
        Ok(_) => panic!("{url}: connected although TLS should have failed"),
    };
    assert!(message.contains("TLS"), "{message}");
    assert!(!message.contains("PRIVATE KEY"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(10), "{message}");
    message
}

#[tokio::test]
async fn locks_work_over_tls_with_the_test_ca() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let lock = ZkConfig::from_url(&url(&server, &ca_param(&tls.certificates)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "one").await.unwrap();
    // The same through the builder.
    let pem = std::fs::read_to_string(tls.certificates.ca()).unwrap();
    let lock = common::config(
        &format!("127.0.0.1:{}", server.tls_port().unwrap()),
        &common::namespace("tls-builder"),
    )
    .tls(ZkTls::new(pem))
    .connect()
    .await
    .unwrap();
    distlock_testkit::rising_tokens(&lock, "builder")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_server_is_refused() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let stranger = TestCertificates::generate().unwrap();
    refused(&url(&server, &ca_param(&stranger))).await;
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_refuses_a_client_without_one() {
    let tls = ServerTls::mutual().unwrap();
    let server = tls_server(&tls).await;
    let certs = &tls.certificates;
    refused(&url(&server, &ca_param(certs))).await;
    let with_identity = format!(
        "{}&cert={}&key={}",
        ca_param(certs),
        certs.client_cert().display(),
        certs.client_key().display()
    );
    let lock = ZkConfig::from_url(&url(&server, &with_identity))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "mutual")
        .await
        .unwrap();
}

#[test]
fn tls_settings_are_checked_when_the_url_is_parsed() {
    let certs = TestCertificates::generate().unwrap();
    let reason = |url: &str| match ZkConfig::from_url(url) {
        Err(LockError::Config { reason, .. }) => reason,
        other => panic!("{url}: expected a Config error, got {other:?}"),
    };
    let without_tls = reason(&format!("zk://u:s3cret@h?{}", ca_param(&certs)));
    assert!(without_tls.contains("tls=true"), "{without_tls}");
    assert!(!without_tls.contains("s3cret"), "{without_tls}");
    assert!(reason("zk://h?tls=true").contains("ca="));
    let missing = reason("zk://h?tls=true&ca=/nonexistent/ca.pem");
    assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
    let half = reason(&format!(
        "zk://h?tls=true&{}&key={}",
        ca_param(&certs),
        certs.client_key().display()
    ));
    assert!(half.contains("needs its key"), "{half}");
    let config = ZkConfig::from_url(&format!(
        "zk://h?tls=true&{}&cert={}&key={}",
        ca_param(&certs),
        certs.client_cert().display(),
        certs.client_key().display()
    ))
    .unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
}
