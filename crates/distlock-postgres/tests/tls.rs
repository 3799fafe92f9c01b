//! PostgreSQL URLs with `sslmode`, `sslrootcert` (and `tls=true`) against a
//! server with `ssl=on` and a CA made at test time: locks work over verified
//! TLS and the server reports the sessions as TLS, a client that does not
//! trust the server is refused with a clear error, and errors never show the
//! password.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::LockError;
use distlock_postgres::PostgresConfig;
use distlock_testkit::servers::{PostgresServer, ServerTls, TestCertificates};
use support::admin_value;

async fn tls_server(tls: &ServerTls) -> PostgresServer {
    PostgresServer::start_tls(tls)
        .await
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL with TLS: {e}"))
}

fn url(server: &PostgresServer, params: &str) -> String {
    format!(
        "{}?table=tls_locks&connect_timeout=5s&{params}",
        server.url()
    )
}

fn ca_param(certs: &TestCertificates) -> String {
    format!("sslrootcert={}", certs.ca().display())
}

/// Sessions of the test role the server runs over TLS, and over plain TCP.
async fn sessions_by_tls(server: &PostgresServer) -> (u64, u64) {
    let count = async |ssl: bool| {
        admin_value(
            server,
            &format!(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.usename = '{}' AND s.ssl = {ssl};",
                server.user()
            ),
        )
        .await
        .parse::<u64>()
        .unwrap()
    };
    (count(true).await, count(false).await)
}

#[tokio::test]
async fn locks_work_over_verified_tls() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let ca = ca_param(&tls.certificates);
    for params in [
        format!("sslmode=verify-full&{ca}"),
        format!("sslmode=verify-ca&{ca}"),
        // `tls=true` means verify-full, as the other schemes' `tls` does.
        format!("tls=true&{ca}"),
    ] {
        let lock = PostgresConfig::from_url(&url(&server, &params))
            .unwrap()
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{params}: {e}"));
        distlock_testkit::rising_tokens(&*lock, "tls/lock")
            .await
            .unwrap_or_else(|e| panic!("{params}: {e:?}"));
        // The client keeps its LISTEN connection and a pooled one open.
        let (over_tls, plain) = sessions_by_tls(&server).await;
        assert!(over_tls >= 1, "{params}: no session over TLS");
        assert_eq!(plain, 0, "{params}: a session without TLS");
        drop(lock);
    }
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_server_is_refused() {
    let tls = ServerTls::generate().unwrap();
    let server = tls_server(&tls).await;
    let stranger = TestCertificates::generate().unwrap();
    // `sslrootcert` alone means verify-full, as in libpq.
    for params in [
        ca_param(&stranger),
        format!("sslmode=verify-ca&{}", ca_param(&stranger)),
    ] {
        let refused = PostgresConfig::from_url(&url(&server, &params))
            .unwrap()
            .connect()
            .await;
        let reason = match refused {
            Err(LockError::Config { reason, .. }) => reason,
            Err(other) => panic!("{params}: expected a Config error, got {other:?}"),
            Ok(_) => panic!("{params}: connected to a server it must not trust"),
        };
        assert!(reason.contains("TLS"), "{params}: {reason}");
        assert!(reason.contains("sslrootcert"), "{params}: {reason}");
        assert!(!reason.contains(server.password()), "{reason}");
    }
}
