//! `SqlStore`: the `Fence` trait on a value table, and one statement fenced in
//! the transaction that admits its token, against a real MariaDB. The shared
//! fence cases (stale, equal, floor, concurrency, bad input, unreachable) run
//! on it in the workspace's `fences` target; these are what only SQL has.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::toolkit::Timeouts;
use distlock_core::{Fence, FencedWrite, FencingToken, LockError};
use distlock_sql::SqlStore;
use std::time::Duration;

const T: fn(u64) -> FencingToken = FencingToken::new;

async fn store() -> SqlStore {
    let url = support::server().await.url();
    let options = url.parse().expect("the launcher's URL parses");
    let timeouts = Timeouts::new(Duration::from_secs(5), Duration::from_secs(5));
    SqlStore::connect(options, timeouts)
        .await
        .expect("the store connects")
}

fn fresh(what: &str) -> String {
    format!("store-{:08x}/{what}", rand::random::<u32>())
}

#[tokio::test]
async fn a_stale_statement_is_rolled_back_and_an_admitted_one_commits() {
    let store = store().await;
    let table = format!("store_rows_{:08x}", rand::random::<u32>());
    support::exec(&format!(
        "CREATE TABLE {table} (id INT PRIMARY KEY, qty INT)"
    ))
    .await;
    let resource = fresh("rows");
    let insert = format!("INSERT INTO {table} VALUES (1, 10)");
    assert_eq!(store.execute(&resource, T(5), &insert).await.unwrap(), 1);
    let take = format!("UPDATE {table} SET qty = qty - 1 WHERE id = 1");
    match store.execute(&resource, T(4), &take).await {
        Err(LockError::StaleToken { highest, .. }) => assert_eq!(highest, T(5)),
        other => panic!("a stale statement gave {other:?}"),
    }
    assert_eq!(store.execute(&resource, T(5), &take).await.unwrap(), 1);
    let qty: Option<i32> = support::value(&format!("SELECT qty FROM {table} WHERE id = 1")).await;
    assert_eq!(qty, Some(9), "exactly the admitted take landed");
}

#[tokio::test]
async fn a_failing_statement_records_no_token() {
    let store = store().await;
    let resource = fresh("failing");
    let err = store
        .execute(&resource, T(8), "UPDATE no_such_table SET x = 1")
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert_eq!(store.highest(&resource).await.unwrap(), None);
}

#[tokio::test]
async fn values_expire_by_the_database_clock_and_the_token_stays() {
    let store = store().await;
    let resource = fresh("expiring");
    let write = FencedWrite::set_expiring("v", Duration::from_millis(300));
    store.write(&resource, T(3), write).await.unwrap();
    assert_eq!(store.read(&resource).await.unwrap().as_deref(), Some("v"));
    support::eventually(Duration::from_secs(5), "the value expires", async || {
        store.read(&resource).await.unwrap().is_none()
    })
    .await;
    assert_eq!(store.highest(&resource).await.unwrap(), Some(T(3)));
    // A counter started on an expired value starts from 0 and never expires.
    let added = store
        .write(&resource, T(3), FencedWrite::add(2))
        .await
        .unwrap();
    assert_eq!(added, distlock_core::WriteOutcome::Counter(2));
}

#[tokio::test]
async fn hashes_are_refused_and_record_no_token() {
    let store = store().await;
    let resource = fresh("hash");
    let err = store
        .write(&resource, T(2), FencedWrite::hash_set("f", "v"))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidWrite { .. }), "{err:?}");
    assert_eq!(store.highest(&resource).await.unwrap(), None);
}

#[tokio::test]
async fn a_lazy_log_flush_is_a_pitfall() {
    let store = store().await;
    assert!(
        store.pitfalls().await.unwrap().is_empty(),
        "defaults are durable"
    );
    support::root_value("SET GLOBAL innodb_flush_log_at_trx_commit = 2").await;
    let pitfalls = store.pitfalls().await.unwrap();
    support::root_value("SET GLOBAL innodb_flush_log_at_trx_commit = 1").await;
    assert!(
        pitfalls
            .iter()
            .any(|p| p.contains("innodb_flush_log_at_trx_commit is 2")),
        "{pitfalls:?}"
    );
}
