//! `rediss+sentinel://` end to end: a TLS primary and replica (replicating over
//! TLS) and three Sentinels that listen and monitor over TLS, all with a CA
//! made at test time. Acquire, renew and release work when the client trusts
//! that CA; a client trusting another CA is refused with an error that names
//! the certificate problem and shows no password.
#![cfg(feature = "tls")]
// A failed set-up or step fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockKey, Renewal, Wait};
use distlock_redis::RedisConfig;
use distlock_testkit::servers::{SentinelOptions, SentinelTopology, ServerTls};
use std::time::Duration;

const PASSWORD: &str = "sentinel-tls-pw";

async fn launch(tls: ServerTls) -> SentinelTopology {
    let options = SentinelOptions {
        password: Some(PASSWORD.into()),
        tls: Some(tls),
        ..SentinelOptions::default()
    };
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(SentinelTopology::start(options)))
        .await
        .expect("launcher thread")
        .expect("redis-server and redis-sentinel must be installed: sudo scripts/install-backends")
}

fn with_ca(topology: &SentinelTopology, tls: &ServerTls) -> String {
    let url = topology.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    format!("{url}?ca={}", tls.certificates.ca().display())
}

#[tokio::test]
async fn locks_work_through_tls_sentinels_and_a_wrong_ca_is_refused_clearly() {
    let tls = ServerTls::generate().unwrap();
    let topology = launch(tls.clone()).await;
    let lock = RedisConfig::from_url(&with_ca(&topology, &tls))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let other = RedisConfig::from_url(&with_ca(&topology, &tls))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("sentinel-tls/job").unwrap();
    let options = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .renewal(Renewal::Manual)
        .wait(Wait::No);
    let lease = lock.acquire(&key, &options).await.unwrap();
    assert!(matches!(
        other.acquire(&key, &options).await,
        Err(LockError::Busy { .. })
    ));
    lease.renew().await.unwrap();
    let token = lease.token();
    lease.release().await.unwrap();
    let next = other.acquire(&key, &options).await.unwrap();
    assert!(next.token() > token, "tokens rise through TLS too");
    next.release().await.unwrap();

    // A CA that did not sign the servers' certificates.
    let stranger = ServerTls::generate().unwrap();
    let refused = RedisConfig::from_url(&with_ca(&topology, &stranger))
        .unwrap()
        .connect()
        .await
        .expect_err("a client trusting another CA must not connect");
    assert!(matches!(refused, LockError::Config { .. }), "{refused:?}");
    let shown = refused.to_string();
    assert!(shown.contains("certificate"), "{shown}");
    assert!(
        shown.contains("ca="),
        "the error says which setting to check: {shown}"
    );
    assert!(!shown.contains(PASSWORD), "{shown}");
}
