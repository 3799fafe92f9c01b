//! `etcds://` against an etcd serving clients over TLS with a CA made at test
//! time: locks work with the right CA (and client certificate), and a client
//! that does not trust the server, or lacks the certificate it asks for, gets a
//! clear error naming TLS, never a panic or a secret.
#![cfg(feature = "tls")]
// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::LockError;
use distlock_etcd::{EtcdConfig, EtcdTls};
use distlock_testkit::servers::{EtcdServer, ServerTls, TestCertificates};
use std::time::{Duration, Instant};

/// A one-member etcd with a TLS client port. The launcher's future is not
/// `Send`, so it runs on a blocking thread of the test's runtime.
async fn tls_server(tls: &ServerTls) -> EtcdServer {
    let runtime = tokio::runtime::Handle::current();
    let tls = tls.clone();
    tokio::task::spawn_blocking(move || runtime.block_on(EtcdServer::start_tls(&tls)))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start etcd with TLS: {e}"))
}

fn url(server: &EtcdServer, params: &str) -> String {
    let port = server.tls_port().expect("started with TLS");
    format!("etcds://127.0.0.1:{port}/tls-test/?connect_timeout=2s&timeout=2s&{params}")
}

fn ca_param(certs: &TestCertificates) -> String {
    format!("ca={}", certs.ca().display())
}

/// The connect error: Config or Unavailable, naming TLS, without key material,
/// and well within the timeouts rather than a hang.
async fn refused(url: &str) -> String {
    let started = Instant::now();
    let result = EtcdConfig::from_url(url).unwrap().connect().await;
    let message = match result {
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
    let lock = EtcdConfig::from_url(&url(&server, &ca_param(&tls.certificates)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "one").await.unwrap();
    // The same through the builder, with the CA given as PEM.
    let pem = std::fs::read(tls.certificates.ca()).unwrap();
    let lock = EtcdConfig::new([format!("127.0.0.1:{}", server.tls_port().unwrap())])
        .tls(EtcdTls::new().ca_certificate(pem))
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
    let lock = EtcdConfig::from_url(&url(&server, &with_identity))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&lock, "mutual")
        .await
        .unwrap();
}
