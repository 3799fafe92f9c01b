//! TLS through `distlock::connect`, for every enabled backend: each server runs
//! with a CA made at test time, a client given that CA locks and unlocks, and a
//! client given another CA is refused with an error naming TLS and no secret.
//! Without the `tls` feature, TLS URLs are Config errors naming the feature.

#![allow(unused_imports, dead_code)]
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

use distlock::{AcquireOptions, LockError, LockKey};
use distlock_testkit::servers::{ServerError, ServerTls, TestCertificates};
use std::time::Duration;

/// Connects with `trusted` (the server's CA) and cycles a lock; connects with
/// `untrusted` (another CA) and expects a refusal naming TLS, without `secret`.
async fn trusted_works_untrusted_refused(trusted: &str, untrusted: &str, secret: &str) {
    let lock = distlock::connect(trusted)
        .await
        .unwrap_or_else(|e| panic!("connect over TLS: {e}"));
    let key = LockKey::new("facade-tls/k").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let lease = lock.acquire(&key, &opts).await.unwrap();
    let token = lease.token();
    lease.release().await.unwrap();
    let again = lock.acquire(&key, &opts).await.unwrap();
    assert!(again.token() > token);
    again.release().await.unwrap();

    let error = match distlock::connect(untrusted).await {
        Ok(_) => panic!("a client that does not trust the server's CA connected"),
        Err(e) => e,
    };
    assert!(
        matches!(
            error,
            LockError::Config { .. } | LockError::Unavailable { .. }
        ),
        "{error:?}"
    );
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("TLS"), "{shown}");
    assert!(
        !shown.contains(secret) && !shown.contains("PRIVATE KEY"),
        "{shown}"
    );
}

fn started<T>(what: &str, server: Result<T, ServerError>) -> T {
    server.unwrap_or_else(|e| panic!("cannot start {what} with TLS: {e}"))
}

fn tls() -> (ServerTls, TestCertificates) {
    (
        ServerTls::generate().unwrap(),
        TestCertificates::generate().unwrap(),
    )
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn rediss_urls_connect_with_their_ca() {
    use distlock_testkit::servers::{RedisOptions, RedisServer};
    let (tls, stranger) = tls();
    let secret = "facade-tls-pw";
    let options = RedisOptions {
        password: Some(secret.into()),
        tls: Some(tls.clone()),
        ..RedisOptions::default()
    };
    let server = started("redis-server", RedisServer::start_with(options).await);
    let base = server.tls_url().unwrap();
    trusted_works_untrusted_refused(
        &format!("{base}?ca={}", tls.certificates.ca().display()),
        &format!("{base}?ca={}", stranger.ca().display()),
        secret,
    )
    .await;
}

#[cfg(all(feature = "etcd", feature = "tls"))]
#[tokio::test]
async fn etcds_urls_connect_with_their_ca() {
    let (tls, stranger) = tls();
    let server = started(
        "etcd",
        distlock_testkit::servers::EtcdServer::start_tls(&tls).await,
    );
    let base = format!(
        "etcds://127.0.0.1:{}/facade-tls/",
        server.tls_port().unwrap()
    );
    trusted_works_untrusted_refused(
        &format!("{base}?ca={}", tls.certificates.ca().display()),
        &format!("{base}?ca={}&connect_timeout=2s", stranger.ca().display()),
        "PRIVATE KEY",
    )
    .await;
}

#[cfg(all(feature = "mysql", feature = "tls"))]
#[tokio::test]
async fn mysql_urls_connect_with_ssl_mode_and_their_ca() {
    let (tls, stranger) = tls();
    let server = started(
        "MariaDB",
        distlock_testkit::servers::MariaDbServer::start_tls(&tls).await,
    );
    let base = format!("{}?ssl-mode=verify_ca", server.url());
    trusted_works_untrusted_refused(
        &format!("{base}&ssl-ca={}", tls.certificates.ca().display()),
        &format!("{base}&ssl-ca={}", stranger.ca().display()),
        server.password(),
    )
    .await;
}

#[cfg(all(feature = "zookeeper", feature = "tls"))]
#[tokio::test]
async fn zk_urls_connect_over_tls_with_their_ca() {
    use distlock_testkit::servers::{ZooKeeperOptions, ZooKeeperServer};
    let (tls, stranger) = tls();
    let options = ZooKeeperOptions {
        tls: Some(tls.clone()),
        ..ZooKeeperOptions::default()
    };
    let server = started("ZooKeeper", ZooKeeperServer::start_with(options).await);
    let base = format!(
        "zk://127.0.0.1:{}?tls=true&connect_timeout=2s",
        server.tls_port().unwrap()
    );
    trusted_works_untrusted_refused(
        &format!("{base}&ca={}", tls.certificates.ca().display()),
        &format!("{base}&ca={}", stranger.ca().display()),
        "PRIVATE KEY",
    )
    .await;
}

/// A build without `tls` refuses TLS settings at once, naming the feature
/// (run with `--features etcd,mysql,zookeeper`, without `tls`).
#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn tls_urls_without_the_feature_name_it() {
    let urls = [
        (
            cfg!(feature = "etcd"),
            "etcds://127.0.0.1:1/ns?ca=/x/ca.pem",
        ),
        (
            cfg!(feature = "mysql"),
            "mysql://u:pw-never-shown@127.0.0.1:1/db?ssl-mode=verify_ca",
        ),
        (
            cfg!(feature = "zookeeper"),
            "zk://127.0.0.1:1?tls=true&ca=/dev/null",
        ),
    ];
    for (_, url) in urls.into_iter().filter(|(enabled, _)| *enabled) {
        let reason = match distlock::connect(url).await {
            Err(LockError::Config { reason, .. }) => reason,
            Err(other) => panic!("{url}: expected a Config error, got {other:?}"),
            Ok(_) => panic!("{url}: connected without TLS support"),
        };
        assert!(
            reason.contains("`tls` feature of the distlock crate"),
            "{url}: {reason}"
        );
        assert!(!reason.contains("pw-never-shown"), "{reason}");
    }
}
