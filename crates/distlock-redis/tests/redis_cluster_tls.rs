//! `rediss+cluster://` against three primaries that speak TLS to clients, on
//! their cluster bus and for replication, with a CA made at test time: a lock
//! is taken, renewed, waited for (the release heard through sharded pub/sub
//! over TLS) and released; a client trusting another CA is refused with an
//! error that names the certificate problem and shows no password.
#![cfg(feature = "tls")]
// A failed set-up or step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Renewal, Wait};
use distlock_redis::{DEFAULT_NAMESPACE, LockKeys, RedisConfig, RedisLock};
use distlock_testkit::servers::{RedisCluster, RedisOptions, ServerTls};
use std::time::{Duration, Instant};

const PASSWORD: &str = "cluster-tls-pw";

async fn connect(url: &str) -> Result<RedisLock, LockError> {
    RedisConfig::from_url(url)?.connect().await
}

#[tokio::test]
async fn locks_work_on_a_tls_cluster_and_a_wrong_ca_is_refused_clearly() {
    let tls = ServerTls::generate().unwrap();
    let options = RedisOptions {
        password: Some(PASSWORD.into()),
        tls: Some(tls.clone()),
        ..RedisOptions::default()
    };
    let runtime = tokio::runtime::Handle::current();
    let start = move || runtime.block_on(RedisCluster::start_with(3, options));
    let cluster = tokio::task::spawn_blocking(start).await.unwrap().unwrap();
    let base = cluster.tls_url().expect("started with TLS");
    let url = format!("{base}?ca={}", tls.certificates.ca().display());
    let (holder, waiter) = (connect(&url).await.unwrap(), connect(&url).await.unwrap());

    let key = LockKey::new("cluster-tls/job").unwrap();
    let waited_key = key.clone();
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .renewal(Renewal::Manual)
        .wait(Wait::For(Duration::from_secs(20)));
    let lease = holder.acquire(&key, &options).await.unwrap();
    lease.renew().await.unwrap();
    let token = lease.token();
    let waiting = tokio::spawn(async move {
        let lease = waiter.acquire(&waited_key, &options).await.unwrap();
        (Instant::now(), lease)
    });
    // Once the waiter is subscribed (over TLS, on the slot's primary), its
    // wake-up can only be the release message, far sooner than the 30 s ttl or
    // the 5 s nap.
    let keys = LockKeys::new(DEFAULT_NAMESPACE, &key);
    let slot = cluster
        .cli(0, &["CLUSTER", "KEYSLOT", &keys.lock])
        .await
        .unwrap();
    let owner = cluster
        .owner_of(slot.trim().parse().unwrap())
        .await
        .unwrap();
    let asked = Instant::now();
    loop {
        let count = cluster
            .cli(owner, &["PUBSUB", "SHARDNUMSUB", &keys.channel])
            .await
            .unwrap();
        if count.lines().nth(1).map(str::trim) == Some("1") {
            break;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "never subscribed: {count}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let released = Instant::now();
    lease.release().await.unwrap();
    let (woken, next) = waiting.await.unwrap();
    assert!(
        woken - released < Duration::from_secs(2),
        "woken after {:?}",
        woken - released
    );
    assert!(next.token() > token);
    next.release().await.unwrap();

    let stranger = ServerTls::generate().unwrap();
    let wrong = format!("{base}?ca={}", stranger.certificates.ca().display());
    let refused = connect(&wrong)
        .await
        .expect_err("another CA must be refused");
    assert!(matches!(refused, LockError::Config { .. }), "{refused:?}");
    let shown = refused.to_string();
    assert!(
        shown.contains("certificate") && shown.contains("ca="),
        "{shown}"
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
}
