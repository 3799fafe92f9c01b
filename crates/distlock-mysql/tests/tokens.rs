//! Fencing tokens: they only go up, whatever happens to the rows.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockKey, Renewal};
use distlock_mysql::{Strategy, row_name};
use std::sync::Arc;
use std::time::Duration;
use support::{client, eventually, root_value, server};
use tokio::sync::Barrier;

/// version_cas keeps the row on release: tokens keep rising across many
/// release/re-acquire cycles, and the row's fence is the last token.
#[tokio::test(flavor = "multi_thread")]
async fn version_cas_tokens_keep_rising_across_many_reacquires() {
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "locks").await;
    let other = client(&server, Strategy::VersionCas, "locks").await;
    let key = LockKey::new("ledger/α").unwrap();
    let mut last = None;
    for round in 0..200 {
        let by = if round % 2 == 0 { &lock } else { &other };
        let lease = by.acquire(&key, &AcquireOptions::new()).await.unwrap();
        assert!(
            Some(lease.token()) > last,
            "round {round}: {} after {last:?}",
            lease.token()
        );
        last = Some(lease.token());
        lease.release().await.unwrap();
    }
    let row = root_value(
        &server,
        "SELECT CONCAT(COUNT(*), ':', MAX(fence), ':', COUNT(owner)) FROM distlock.locks;",
    )
    .await;
    let last = last.unwrap().get();
    assert_eq!(
        row,
        format!("1:{last}:0"),
        "one row, fence = last token, no owner"
    );
}

/// unique_insert: an expired holder's row is taken over by exactly one of 16
/// contenders racing for it, with a higher token.
#[tokio::test(flavor = "multi_thread")]
async fn unique_insert_expired_row_is_taken_over_by_exactly_one_of_16() {
    let server = server().await;
    let key = LockKey::new("flash-sale/sku-42").unwrap();
    let crashed = client(&server, Strategy::UniqueInsert, "locks").await;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(300))
        .renewal(Renewal::Manual);
    let lease = crashed.acquire(&key, &opts).await.unwrap();
    let expired_token = lease.token();
    lease.abandon();
    let name = String::from_utf8(row_name(&key)).unwrap();
    let expired = format!(
        "SELECT COUNT(*) FROM distlock.locks WHERE name = '{name}' AND expires_at <= NOW(6);"
    );
    eventually(Duration::from_secs(5), "the row expires", async || {
        root_value(&server, &expired).await == "1"
    })
    .await;

    let mut contenders = Vec::new();
    for _ in 0..16 {
        contenders.push(client(&server, Strategy::UniqueInsert, "locks").await);
    }
    let start = Arc::new(Barrier::new(16));
    let tasks: Vec<_> = contenders
        .into_iter()
        .map(|contender| {
            let (key, start) = (key.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let lease = contender
                    .try_acquire(&key, &AcquireOptions::new())
                    .await
                    .unwrap();
                // Keep the client alive as long as the lease.
                lease.map(|lease| (lease, contender))
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        winners.extend(task.await.unwrap());
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one contender takes the expired row"
    );
    let (winner, _client) = winners.pop().unwrap();
    assert!(winner.token() > expired_token);
    winner.release().await.unwrap();
    let rows = root_value(
        &server,
        "SELECT COUNT(*) FROM distlock.locks WHERE owner IS NOT NULL;",
    )
    .await;
    assert_eq!(rows, "0", "release deleted the lock row");
}

/// The insert id that proves an acquisition is per statement: on a connection
/// whose last statement won a lock, a CAS on a held or absent row reports exactly
/// that, never the earlier token.
#[tokio::test(flavor = "multi_thread")]
async fn insert_id_proof_does_not_leak_between_statements() {
    let server = server().await;
    for strategy in [Strategy::VersionCas, Strategy::UniqueInsert] {
        let table = format!("leak_{}", strategy.as_str());
        let (a, b) = (
            client(&server, strategy, &table).await,
            client(&server, strategy, &table).await,
        );
        let (won, held) = (LockKey::new("won").unwrap(), LockKey::new("held").unwrap());
        let theirs = b.acquire(&held, &AcquireOptions::new()).await.unwrap();
        for round in 0..5 {
            // Sequential statements of `a` reuse its most recent connection.
            let mine = a.acquire(&won, &AcquireOptions::new()).await.unwrap();
            assert!(
                a.try_acquire(&held, &AcquireOptions::new())
                    .await
                    .unwrap()
                    .is_none(),
                "{strategy:?} round {round}"
            );
            let fresh = LockKey::new(format!("fresh-{round}")).unwrap();
            let lease = a.acquire(&fresh, &AcquireOptions::new()).await.unwrap();
            assert!(
                lease.token() != mine.token(),
                "a new row's token is its own"
            );
            lease.release().await.unwrap();
            mine.release().await.unwrap();
        }
        theirs.release().await.unwrap();
    }
}
