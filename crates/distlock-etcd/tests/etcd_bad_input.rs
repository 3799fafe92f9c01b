//! Bad URLs, unreachable or dead servers, wrong credentials and bad ttls: each a
//! clear error within the timeouts, never a hang, a panic or a leaked password.

mod common;

use common::{connect, server, unique};
use distlock_core::adapter::{AcquireRequest, Backend, WaitUntil};
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, DistributedLock, HolderMeta, LockError, Wait};
use distlock_etcd::EtcdConfig;
use std::time::{Duration, Instant};

#[test]
fn unparsable_urls_are_config_errors() {
    for url in [
        "",
        "etcd//h",
        "http://h:2379",
        "etcd://",
        "etcd://h:99999",
        "etcd://h,,h2",
        "etcd://h?bogus=1",
        "etcd://h?timeout=soon",
        "etcd://h?request_timeout=2s",
        "etcd://h?timeout=2000",
        "etcd://h?connect_timeout=0s",
        "etcd://user@h",
    ] {
        assert!(
            matches!(EtcdConfig::from_url(url), Err(LockError::Config { .. })),
            "{url}"
        );
    }
}

#[test]
fn passwords_never_show() {
    let config = EtcdConfig::from_url("etcd://alice:hunter2@h1:2379,h2/ns").unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
    let error = EtcdConfig::from_url("etcd://alice:hunter2@h1:bad/ns").unwrap_err();
    assert!(
        !error.to_string().contains("hunter2") && !format!("{error:?}").contains("hunter2"),
        "{error}"
    );
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_urls_name_the_missing_feature() {
    let error = EtcdConfig::from_url("etcds://h:2379").unwrap_err();
    assert!(error.to_string().contains("`tls` feature"), "{error}");
}

#[cfg(feature = "tls")]
#[test]
fn tls_urls_need_a_ca_and_readable_files() {
    let error = EtcdConfig::from_url("etcds://h:2379?ca=/nonexistent/ca.pem").unwrap_err();
    assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    assert!(
        EtcdConfig::from_url("etcd://h:2379?domain=x").is_err(),
        "TLS options on a plain URL"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_within_the_timeouts() {
    // Nobody listens: refused at once.
    let port = distlock_testkit::servers::free_port().unwrap();
    let started = Instant::now();
    let error = EtcdConfig::new([format!("127.0.0.1:{port}")])
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::Unavailable { endpoint, .. } if endpoint.contains(&port.to_string())),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // A listener that never answers: the timeouts bound it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    let error = EtcdConfig::new([silent.local_addr().unwrap().to_string()])
        .timeouts(Timeouts::new(
            Duration::from_millis(300),
            Duration::from_millis(300),
        ))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Unavailable { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_gives_errors_within_the_timeouts_not_hangs() {
    let etcd = server().await;
    let lock = EtcdConfig::new([etcd.addr().to_string()])
        .timeouts(Timeouts::new(
            Duration::from_secs(5),
            Duration::from_millis(500),
        ))
        .connect()
        .await
        .unwrap();
    let key = unique("dead-server");
    let held = lock
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(4)))
        .await
        .unwrap();
    etcd.kill();
    let started = Instant::now();
    let outcome = lock
        .acquire(
            &unique("other"),
            &AcquireOptions::new().wait(Wait::For(Duration::from_secs(1))),
        )
        .await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_transient()),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let reason = tokio::time::timeout(Duration::from_secs(8), held.lost())
        .await
        .expect("lost() never fired");
    assert_eq!(reason, distlock_core::LossReason::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_credentials_are_config_errors_and_right_ones_work() {
    let etcd = server().await;
    etcd.enable_auth("root-secret-1").await.unwrap();
    let addr = etcd.addr().to_string();

    let error = EtcdConfig::new([addr.clone()])
        .auth("root", "not-the-password")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Config { .. }), "{error}");
    assert!(
        error.to_string().contains("user name and password"),
        "{error}"
    );
    assert!(!error.to_string().contains("not-the-password"));

    let anonymous = EtcdConfig::new([addr.clone()]).connect().await;
    let error = match anonymous {
        Err(e) => e,
        Ok(lock) => lock
            .acquire(&unique("anonymous"), &AcquireOptions::new())
            .await
            .unwrap_err(),
    };
    assert!(matches!(error, LockError::Config { .. }), "{error}");
    assert!(
        error.to_string().contains("requires authentication"),
        "{error}"
    );

    let lock = EtcdConfig::from_url(&format!("etcd://root:root-secret-1@{addr}/auth"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    lock.acquire(&unique("authenticated"), &AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_below_the_servers_minimum_or_not_whole_seconds_are_rejected() {
    // The launched etcd has etcd's default 1 s election timeout: leases are at
    // least 2 s.
    let etcd = server().await;
    let lock = connect(&[etcd.addr()], "ttl/").await;
    assert_eq!(lock.capabilities().min_ttl, Duration::from_secs(2));
    let key = unique("ttl");
    for (ttl, says) in [
        (Duration::from_secs(1), "minimum of 2s"),
        (Duration::from_millis(2500), "whole multiple of 1s"),
        (Duration::from_millis(500), "minimum"),
    ] {
        match lock.acquire(&key, &AcquireOptions::new().ttl(ttl)).await {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.contains(says), "{ttl:?}: {reason}")
            }
            other => panic!("ttl {ttl:?} gave {other:?}"),
        }
    }
    // Past core's check, etcd's own answer is checked too: a grant etcd lengthened
    // is refused, not used.
    let request = AcquireRequest {
        key: &key,
        ttl: Duration::from_secs(1),
        wait: WaitUntil::No,
        started: Instant::now(),
        meta: &HolderMeta::this_process(),
    };
    match lock.backend().acquire(request).await {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(reason.contains("at least 2s"), "{reason}")
        }
        other => panic!("a 1 s lease gave {other:?}"),
    }
    lock.acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(2)))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
