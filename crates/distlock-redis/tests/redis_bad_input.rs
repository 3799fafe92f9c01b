//! Bad URLs, unreachable servers, wrong passwords, servers without scripting,
//! and too few replicas: each a clear error, none a hang or a panic.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, client, raw, server, servers};
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Wait};
use distlock_redis::{LockKeys, RedisConfig};
use distlock_testkit::servers::RedisOptions;
use std::time::{Duration, Instant};

#[test]
fn bad_urls_are_config_errors_that_say_why_without_the_password() {
    let cases = [
        ("", "scheme"),
        ("redis//x", "scheme"),
        ("not a url", "scheme"),
        ("http://:secret@h:1", "scheme"),
        ("redis://:secret@h:99999", "port"),
        ("redis:///0", "no host"),
        ("redis://:secret@h/db", "not a database number"),
        ("redis://:secret@h/-1", "not a database number"),
        ("redis://:secret@h?bogus=1", "unknown URL parameter `bogus`"),
        ("redis://h?namepsace=x", "did you mean `namespace`"),
        ("redis://h?ttl=soon", "ttl=soon"),
        ("redis://h?ttl=5000", "5000ms"),
        ("redis://h?namespace={x}", "brace"),
        ("redis://h?timeout=0s", "timeout=0s"),
        ("redis://h?response_timeout=1s", "now called `timeout`"),
        ("redis://h?wait_timeout=1s", "wait_replicas"),
        ("redis://h?wait_replicas=0", "at least 1"),
        (
            "redis://h?ttl=1ms",
            "acquire defaults: invalid lock options: ttl 1ms is below",
        ),
        ("redis://:secret@h/0#insecure", "?insecure=true"),
        ("redis://:secret@h/0?insecure=true", "needs rediss://"),
        ("redis://:secret@h/0?protocol=9", "resp3"),
        ("redis://:secret@a,b", "redlock://"),
        ("redlock://:secret@a,b,c", "RedlockConfig"),
    ];
    for (url, why) in cases {
        match RedisConfig::from_url(url) {
            Err(LockError::Config { reason, .. }) => {
                assert!(
                    reason.contains(why) && !reason.contains("secret"),
                    "{url}: {reason}"
                )
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_within_the_connect_timeout() {
    // A port nobody listens on: refused at once.
    let port = distlock_testkit::servers::free_port().unwrap();
    let started = Instant::now();
    let err = RedisConfig::from_url(&format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::Unavailable { ref endpoint, .. } if endpoint.contains(&port.to_string())),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A listener that never answers: the connect timeout bounds it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let started = Instant::now();
    let err = RedisConfig::from_url(&format!("redis://{addr}"))
        .unwrap()
        .timeouts(Timeouts::new(
            Duration::from_millis(300),
            Duration::from_secs(5),
        ))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_config_error_that_hides_the_password() {
    let options = RedisOptions {
        password: Some("right-one".into()),
        ..RedisOptions::default()
    };
    let server = servers(1, options).await.pop().unwrap();
    let url = format!("redis://:wrong-one@127.0.0.1:{}/0", server.port());
    let err = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LockError::Config { .. }), "{text}");
    assert!(
        text.contains("password")
            && !text.contains("wrong-one")
            && !format!("{err:?}").contains("wrong-one"),
        "{text}"
    );
    // And the right one works.
    client(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_rejects_scripts_is_named_as_such() {
    let server = server().await;
    let mut conn = admin(&server).await;
    let _: String = raw(
        &mut conn,
        &[
            "ACL",
            "SETUSER",
            "noscript",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ],
    )
    .await;
    let url = format!("redis://noscript:pw@127.0.0.1:{}/0", server.port());
    let err = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LockError::Backend { .. }) && text.contains("SCRIPT"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_fail_the_acquire_and_leave_no_key() {
    let server = server().await;
    let lock = RedisConfig::from_url(&server.url())
        .unwrap()
        .wait_for_replicas(1, Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("replicated").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::No);
    let err = lock.acquire(&key, &opts).await.unwrap_err();
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    let conn = admin(&server).await;
    let lock_key = LockKeys::new("distlock:", &key).lock;
    common::eventually(
        Duration::from_secs(2),
        "the undone acquire's key is gone",
        || {
            let (mut conn, lock_key) = (conn.clone(), lock_key.clone());
            async move { raw::<i64>(&mut conn, &["EXISTS", &lock_key]).await == 0 }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_acknowledges_acquire_and_release() {
    let mut pair = servers(2, RedisOptions::default()).await;
    let (replica, primary) = (pair.pop().unwrap(), pair.pop().unwrap());
    let mut conn = admin(&replica).await;
    let port = primary.port().to_string();
    let _: String = raw(&mut conn, &["REPLICAOF", "127.0.0.1", &port]).await;
    let primary_conn = admin(&primary).await;
    // Online, not merely connected: the first sync waits out repl-diskless-sync-delay.
    common::eventually(Duration::from_secs(30), "replica online", || {
        let mut conn = primary_conn.clone();
        async move {
            raw::<String>(&mut conn, &["INFO", "replication"])
                .await
                .contains("state=online")
        }
    })
    .await;
    let lock = RedisConfig::from_url(&primary.url())
        .unwrap()
        .wait_for_replicas(1, Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("replicated").unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let on_replica: Option<String> =
        raw(&mut conn, &["GET", &LockKeys::new("distlock:", &key).lock]).await;
    assert!(
        on_replica.is_some(),
        "WAIT returned before the replica had the lock"
    );
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_lacks_is_a_config_error() {
    let server = server().await;
    let url = format!("redis://127.0.0.1:{}/99999", server.port());
    let err = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LockError::Config { .. }) && text.contains("databases"),
        "{text}"
    );
}
