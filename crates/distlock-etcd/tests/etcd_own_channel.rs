//! Locks over the application's own tonic `Channel` to etcd: they exclude
//! each other and raise tokens with the config's other settings applied, and
//! a channel that reaches nothing fails at connect, naming the channel.

mod common;

use common::{server, unique};
use distlock_core::toolkit::Timeouts;
use distlock_core::{AcquireOptions, DistributedLock, LockError};
use distlock_etcd::EtcdConfig;
use std::time::{Duration, Instant};
use tonic::transport::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_the_apps_channel_exclude_and_raise_tokens() {
    let etcd = server().await;
    let channel = Endpoint::from_shared(format!("http://{}", etcd.addr()))
        .expect("an endpoint")
        .connect_lazy();
    let config = EtcdConfig::from_channel(channel).namespace("own-channel/");
    let lock = config
        .clone()
        .connect()
        .await
        .expect("connects over the channel");
    let other = config.connect().await.expect("connects over the channel");
    let key = unique("own");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));
    let held = lock.acquire(&key, &opts).await.expect("acquires");
    assert!(
        other
            .try_acquire(&key, &opts)
            .await
            .expect("asks")
            .is_none()
    );
    let holder = lock
        .inspect()
        .expect("inspect")
        .holder(&key)
        .await
        .expect("reads");
    assert_eq!(holder.and_then(|h| h.token), Some(held.token()));
    let token = held.token();
    held.release().await.expect("releases");
    let next = other
        .acquire(&key, &opts)
        .await
        .expect("acquires after the release");
    assert!(next.token() > token, "{} after {token}", next.token());
    next.release().await.expect("releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_that_reaches_nothing_fails_at_connect_naming_it() {
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = nowhere.local_addr().expect("its address").port();
    drop(nowhere);
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("an endpoint")
        .connect_timeout(Duration::from_millis(200))
        .connect_lazy();
    let timeouts = Timeouts::new(Duration::from_millis(500), Duration::from_millis(500));
    let started = Instant::now();
    let refused = EtcdConfig::from_channel(channel)
        .timeouts(timeouts)
        .connect()
        .await
        .expect_err("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(refused, LockError::Unavailable { .. }),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("application's channel"),
        "{refused}"
    );
}
