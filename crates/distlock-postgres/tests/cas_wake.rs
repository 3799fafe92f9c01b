//! `version_cas`: a release notifies only when a waiter marked the name. The
//! mark is a shared advisory lock its client's listening session holds while
//! the client has waiters of the name; a listening session lost and made
//! again takes its marks again.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Wait};
use distlock_postgres::{PostgresConfig, Strategy};
use distlock_testkit::proxy::FaultProxy;
use distlock_testkit::servers::PostgresServer;
use distlock_testkit::{Fault, FaultControl};
use std::time::Duration;
use support::{admin_value, client, eventually, mark_holders, only_marked_names_notify, server};

const TABLE: &str = "quiet_cas";

/// The sessions holding a mark on `key` of [`TABLE`]: the pair (hash of the
/// table, hash of the release's payload).
async fn marked_by(server: &PostgresServer, key: &LockKey) -> Vec<String> {
    let hash = |text: &str| format!("hashtext('{text}')::BIGINT & 4294967295");
    let payload = format!("distlock' || E'\\n' || '{}", key.as_str());
    mark_holders(server, &hash(TABLE), &hash(&payload)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_notifies_only_when_a_waiter_marked_the_name() {
    let server = server().await;
    let marks = async |key: &LockKey| marked_by(&server, key).await.len();
    // The listening session ends while the waiter waits: the mark goes with
    // it, and the session made again takes it again before the release.
    let lose_the_listener = async |key: &LockKey| {
        let lost = marked_by(&server, key).await.remove(0);
        let ended = admin_value(&server, &format!("SELECT pg_terminate_backend({lost});")).await;
        assert_eq!(ended, "t", "the listening session was ended");
        eventually(Duration::from_secs(5), "the mark taken again", async || {
            let now = marked_by(&server, key).await;
            now.len() == 1 && now[0] != lost
        })
        .await;
    };
    // The mark is dropped by the listening session once the winner's waiter
    // is gone, a moment after the win.
    only_marked_names_notify(
        &server,
        Strategy::VersionCas,
        TABLE,
        marks,
        lose_the_listener,
    )
    .await;
}

/// A mark sent while the listening session is cut off gets no answer: the
/// waiter stops waiting for it after the reply timeout and polls, so it still
/// gets the lock once released (it used to wait for the mark forever).
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_whose_listener_is_cut_off_polls() {
    let server = server().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let holder = client(&server, Strategy::VersionCas, TABLE).await;
    // The lock statements go straight to the server; the listener through
    // the proxy.
    let url = format!(
        "{}?table={TABLE}&timeout=1s&listen_at={}",
        server.url(),
        proxy.addr()
    );
    let cut_off = PostgresConfig::from_url(&url).unwrap().connect().await;
    let cut_off = cut_off.expect("connects, and listens through the proxy");
    proxy.set_fault(Fault::Blackhole).await;
    let key = LockKey::new("jobs/cut-off").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let lease = holder.acquire(&key, &opts).await.unwrap();
    // The statements run on the table, this query's own aside.
    let attempts = async || {
        let sql = format!(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
             WHERE query LIKE '%{TABLE}%' AND query NOT LIKE '%pg_stat_statements%';"
        );
        admin_value(&server, &sql).await.parse::<u64>().unwrap()
    };
    let before = attempts().await;
    let waiter = tokio::spawn({
        let (key, opts) = (key.clone(), opts.clone().wait(Wait::Forever));
        async move { cut_off.acquire(&key, &opts).await }
    });
    // The waiter's first attempt finds the lock held; its mark, sent next,
    // goes unanswered.
    eventually(
        Duration::from_secs(5),
        "the waiter's first attempt",
        async || attempts().await > before,
    )
    .await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let first = lease.token();
    lease.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter polls once its mark is not answered")
        .unwrap()
        .unwrap();
    assert!(next.token() > first);
    next.release().await.unwrap();
}
