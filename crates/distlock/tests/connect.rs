//! `connect(url)` reaches every enabled backend's real server (a testkit launcher,
//! or `DISTLOCK_TEST_<BACKEND>_URL`), and two clients of one URL contend.

#![allow(unused_imports, dead_code)]
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

use distlock::{AcquireOptions, DynLock, LockError, LockKey, Wait};
use distlock_testkit::servers::{ServerError, external_url};
use std::time::Duration;

/// Two clients from one URL: exclusion, then rising tokens across them.
async fn two_clients_contend(url: &str, backend: &str) {
    let a: DynLock = distlock::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect {backend}: {e}"));
    let b: DynLock = distlock::connect(url).await.unwrap();
    assert_eq!(a.name(), backend);
    let key = LockKey::new(format!("facade-test/{:x}/k", rand_u64())).unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Wait::For(Duration::from_secs(10)));
    let first = a.acquire(&key, &opts).await.unwrap();
    assert!(
        b.try_acquire(&key, &opts).await.unwrap().is_none(),
        "{backend}: no exclusion"
    );
    let t1 = first.token();
    first.release().await.unwrap();
    let second = b.acquire(&key, &opts).await.unwrap();
    assert!(second.token() > t1, "{backend}: tokens did not rise");
    second.release().await.unwrap();
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn started<T>(what: &str, server: Result<T, ServerError>) -> T {
    server.unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_url_connects() {
    let server;
    let url = match external_url("redis") {
        Some(url) => url,
        None => {
            server = started(
                "redis-server",
                distlock_testkit::servers::RedisServer::start().await,
            );
            server.url()
        }
    };
    two_clients_contend(&url, "redis").await;
}

#[cfg(feature = "redlock")]
#[tokio::test]
async fn redlock_url_connects() {
    let servers;
    let nodes: Vec<String> = match external_url("redlock") {
        Some(urls) => urls
            .split(',')
            .map(|u| {
                u.trim()
                    .trim_start_matches("redis://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect(),
        None => {
            servers = started(
                "redis-server ×3",
                distlock_testkit::servers::RedisServer::start_many(3).await,
            );
            servers
                .iter()
                .map(|s| format!("127.0.0.1:{}", s.port()))
                .collect()
        }
    };
    two_clients_contend(&format!("redlock://{}", nodes.join(",")), "redlock").await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_url_connects() {
    let server;
    let url = match external_url("etcd") {
        Some(url) => url,
        None => {
            server = started("etcd", distlock_testkit::servers::EtcdServer::start().await);
            format!("etcd://127.0.0.1:{}/facade-test", server.port())
        }
    };
    two_clients_contend(&url, "etcd").await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test]
async fn zookeeper_url_connects() {
    let server;
    let url = match external_url("zookeeper") {
        Some(url) => url,
        None => {
            server = started(
                "ZooKeeper",
                distlock_testkit::servers::ZooKeeperServer::start().await,
            );
            format!("zk://127.0.0.1:{}", server.port())
        }
    };
    two_clients_contend(&url, "zookeeper").await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_url_connects() {
    let server;
    let url = match external_url("mysql") {
        Some(url) => url,
        None => {
            server = started(
                "MariaDB",
                distlock_testkit::servers::MariaDbServer::start().await,
            );
            server.url()
        }
    };
    two_clients_contend(&url, "mysql").await;
}

/// Unreachable servers: the error names the address and never the password.
#[tokio::test]
async fn unreachable_backends_never_show_the_password() {
    let secret = "pw-never-shown";
    let urls = [
        format!("redis://:{secret}@127.0.0.1:1/0?connect_timeout=2s"),
        format!("redlock://:{secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?connect_timeout=2s"),
        format!("etcd://user:{secret}@127.0.0.1:1?connect_timeout=2s"),
        format!("zk://user:{secret}@127.0.0.1:1?connect_timeout=2s"),
        format!("mysql://user:{secret}@127.0.0.1:1/db?connect_timeout=2s"),
    ];
    for url in urls {
        let error = match distlock::connect(&url).await {
            Ok(_) => panic!("{url} connected to nothing"),
            Err(e) => e,
        };
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(secret), "{shown}");
        let enabled = distlock::BackendKind::from_url(&url).is_ok();
        if enabled {
            assert!(shown.contains("127.0.0.1"), "{shown}");
        } else {
            assert!(matches!(error, LockError::Config { .. }), "{shown}");
        }
    }
}
