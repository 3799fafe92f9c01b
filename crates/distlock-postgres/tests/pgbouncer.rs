//! Through PgBouncer in `pool_mode = transaction` (the conformance suite
//! `postgres_pgbouncer` runs every case there): a client not told about the
//! proxy is refused at connect with the setting to use, never left with locks
//! that cannot be released; `advisory` is refused with `pooler=transaction`;
//! waiters listen on a direct connection only when `listen_at` names one.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockError, LockKey, Wait};
use distlock_postgres::PostgresConfig;
use distlock_testkit::servers::PgBouncerServer;
use std::time::Duration;
use support::admin_value;

async fn pgbouncer() -> PgBouncerServer {
    match PgBouncerServer::start().await {
        Ok(server) => server,
        Err(e) => panic!("cannot start PgBouncer for the test: {e}"),
    }
}

/// The sessions at the server that are listening (their last statement a
/// `LISTEN`): the adapter's listener, and nothing else here.
async fn listeners(server: &PgBouncerServer) -> String {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE usename = 'distlock' AND query LIKE 'LISTEN %';";
    admin_value(server.postgres(), sql).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_not_told_about_the_proxy_is_refused_with_the_setting() {
    let server = pgbouncer().await;
    let refused = PostgresConfig::from_url(&server.url())
        .unwrap()
        .table("unannounced")
        .connect()
        .await
        .expect_err("LISTEN through a transaction pooler cannot work");
    let text = refused.to_string();
    assert!(matches!(refused, LockError::Config { .. }), "{refused:?}");
    assert!(text.contains("pooler=transaction"), "{text}");
    assert!(!text.contains(server.postgres().password()), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn advisory_is_refused_through_the_pooler_with_the_strategy_to_use() {
    let server = pgbouncer().await;
    let url = format!("{}?pooler=transaction&strategy=advisory", server.url());
    let refused = PostgresConfig::from_url(&url).expect_err("advisory needs a session");
    let text = refused.to_string();
    assert!(matches!(refused, LockError::Config { .. }), "{refused:?}");
    assert!(text.contains("strategy=version_cas"), "{text}");
    assert!(!text.contains(server.postgres().password()), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_poll_through_the_pooler_and_listen_where_listen_at_says() {
    let server = pgbouncer().await;
    let key = LockKey::new("jobs/pooled").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Wait::For(Duration::from_secs(5)));
    let pooled = format!("{}?pooler=transaction&table=pooled", server.url());
    let polling = PostgresConfig::from_url(&pooled).unwrap().connect().await;
    let polling = polling.expect("connects through the pooler");
    assert_eq!(
        listeners(&server).await,
        "0",
        "no LISTEN through the pooler"
    );
    let direct = server.postgres().addr();
    let listening = format!("{pooled}&listen_at={direct}");
    let listening = PostgresConfig::from_url(&listening)
        .unwrap()
        .connect()
        .await;
    let listening = listening.expect("connects, and listens directly");
    assert_eq!(
        listeners(&server).await,
        "1",
        "one LISTEN, on the direct connection"
    );
    // Both kinds of waiter get the lock once it is released.
    for waiter in [&polling, &listening] {
        let lease = polling.acquire(&key, &opts).await.unwrap();
        let token = lease.token();
        let waiting = tokio::spawn({
            let (waiter, key, opts) = (waiter.clone(), key.clone(), opts.clone());
            async move { waiter.acquire(&key, &opts).await }
        });
        lease.release().await.unwrap();
        let next = waiting.await.unwrap().unwrap();
        assert!(next.token() > token);
        next.release().await.unwrap();
    }
}
