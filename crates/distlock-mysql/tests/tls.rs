//! MySQL URLs with `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` against MariaDB
//! offering TLS with a CA made at test time: locks work over verified TLS, a
//! client that does not trust the server is refused, and a user that requires a
//! client certificate (`REQUIRE X509`) is refused without one; errors never
//! show the password or key material.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::LockError;
use distlock_mysql::MySqlConfig;
use distlock_testkit::servers::{MariaDbServer, ServerTls, TestCertificates};

async fn tls_server(tls: &ServerTls) -> MariaDbServer {
    MariaDbServer::start_tls(tls)
        .await
        .unwrap_or_else(|e| panic!("cannot start MariaDB with TLS: {e}"))
}

fn url(server: &MariaDbServer, params: &str) -> String {
    format!(
        "{}?table=tls_locks&connect_timeout=5s&{params}",
        server.url()
    )
}

fn ca_param(certs: &TestCertificates) -> String {
    format!("ssl-ca={}", certs.ca().display())
}

/// How many TLS handshakes the server has completed.
async fn ssl_accepts(server: &MariaDbServer) -> u64 {
    let out = server
        .exec_root("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
        .await
        .unwrap();
    out.split_whitespace().last().unwrap().parse().unwrap()
}

/// The connect error: Config, without the password or key material.
async fn refused(server: &MariaDbServer, url: &str) -> String {
    let reason = match MySqlConfig::from_url(url).unwrap().connect().await {
        Err(LockError::Config { reason, .. }) => reason,
        Err(other) => panic!("expected a Config error, got {other:?}"),
        Ok(_) => panic!("connected although it should have been refused"),
    };
    assert!(!reason.contains(server.password()), "{reason}");
    assert!(!reason.contains("PRIVATE KEY"), "{reason}");
    reason
}

#[tokio::test]
async fn locks_work_over_verified_tls() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let before = ssl_accepts(&server).await;
    for mode in ["verify_ca", "verify_identity"] {
        let url = url(
            &server,
            &format!("ssl-mode={mode}&{}", ca_param(&tls.certificates)),
        );
        let lock = MySqlConfig::from_url(&url)
            .unwrap()
            .connect()
            .await
            .unwrap();
        distlock_testkit::rising_tokens(&*lock, &format!("tls/{mode}"))
            .await
            .unwrap();
    }
    assert!(
        ssl_accepts(&server).await > before,
        "the server saw no TLS handshake"
    );
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_server_is_refused() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let stranger = TestCertificates::generate().unwrap();
    // `ssl-ca` alone means verify_ca, as in the mysql client.
    for params in [
        ca_param(&stranger),
        format!("ssl-mode=verify_ca&{}", ca_param(&stranger)),
    ] {
        let reason = refused(&server, &url(&server, &params)).await;
        assert!(reason.contains("TLS"), "{reason}");
    }
}

#[tokio::test]
async fn a_user_that_requires_a_client_certificate_is_refused_without_one() {
    let tls = ServerTls::mutual().unwrap();
    let server = tls_server(&tls).await;
    let certs = &tls.certificates;
    let verified = format!("ssl-mode=verify_ca&{}", ca_param(certs));
    let reason = refused(&server, &url(&server, &verified)).await;
    assert!(
        reason.contains("refused the login") && reason.contains("ssl-cert"),
        "{reason}"
    );
    let with_identity = format!(
        "{verified}&ssl-cert={}&ssl-key={}",
        certs.client_cert().display(),
        certs.client_key().display()
    );
    let lock = MySqlConfig::from_url(&url(&server, &with_identity))
        .unwrap()
        .connect()
        .await
        .unwrap();
    distlock_testkit::rising_tokens(&*lock, "tls/mutual")
        .await
        .unwrap();
}
