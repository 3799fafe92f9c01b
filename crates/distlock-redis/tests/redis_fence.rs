//! `RedisFence` against a real redis-server: MemoryFence's semantics here;
//! user scripts, round trips and the key layout in `redis_fence/scripts.rs`;
//! bad input and unreachable servers in `redis_fence/failures.rs`.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "redis_fence/failures.rs"]
mod failures;
#[path = "redis_fence/scripts.rs"]
mod scripts;

use common::{admin, eventually, raw, server};
use distlock_core::{Fence, FencedWrite, FencingToken, LockError, MemoryFence, WriteOutcome};
use distlock_redis::{RedisConfig, RedisFence};
use distlock_testkit::servers::RedisServer;
use std::collections::HashMap;
use std::time::Duration;

pub const T: fn(u64) -> FencingToken = FencingToken::new;

pub async fn fence(server: &RedisServer) -> RedisFence {
    RedisConfig::from_url(&server.url())
        .unwrap()
        .connect_fence()
        .await
        .unwrap()
}

pub fn assert_stale<T: std::fmt::Debug>(result: Result<T, LockError>, token: u64, highest: u64) {
    match result {
        Err(LockError::StaleToken {
            token: t,
            highest: h,
            ..
        }) => assert_eq!((t, h), (T(token), T(highest))),
        other => panic!("expected StaleToken({token} < {highest}), got {other:?}"),
    }
}

pub fn assert_invalid_write<T: std::fmt::Debug>(result: Result<T, LockError>, why: &str) {
    match result {
        Err(LockError::InvalidWrite { reason }) => assert!(reason.contains(why), "{reason}"),
        other => panic!("expected InvalidWrite ({why}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_token_is_refused_and_changes_nothing() {
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    fence
        .write("doc", T(5), FencedWrite::set("a"))
        .await
        .unwrap();
    fence
        .write("doc", T(5), FencedWrite::set("b"))
        .await
        .unwrap();
    fence
        .write("doc", T(7), FencedWrite::set("c"))
        .await
        .unwrap();
    assert_stale(
        fence.write("doc", T(6), FencedWrite::set("old")).await,
        6,
        7,
    );
    assert_eq!(fence.read("doc").await.unwrap().as_deref(), Some("c"));
    assert_eq!(fence.highest("doc").await.unwrap(), Some(T(7)));
    // The resource is the application's own key; the record sits beside it.
    let value: String = raw(&mut conn, &["GET", "doc"]).await;
    let record: String = raw(&mut conn, &["GET", "distlock:fence:{doc}"]).await;
    assert_eq!((value.as_str(), record.as_str()), ("c", "7"));
    assert_eq!(fence.highest("never-written").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_compare_exactly_beyond_two_to_the_53_and_across_lengths() {
    let server = server().await;
    let fence = fence(&server).await;
    let set = || FencedWrite::set("v");
    fence.write("a", T(9), set()).await.unwrap();
    fence.write("a", T(10), set()).await.unwrap();
    assert_stale(fence.write("a", T(9), set()).await, 9, 10);
    // 2^53 and 2^53 + 1 are one double: only exact comparison tells them apart.
    let big = 1 << 53;
    fence.write("b", T(big + 1), set()).await.unwrap();
    assert_stale(fence.write("b", T(big), set()).await, big, big + 1);
    fence.write("c", T(u64::MAX), set()).await.unwrap();
    fence.write("c", T(u64::MAX), set()).await.unwrap();
    assert_stale(
        fence.write("c", T(u64::MAX - 1), set()).await,
        u64::MAX - 1,
        u64::MAX,
    );
    assert_eq!(fence.highest("c").await.unwrap(), Some(T(u64::MAX)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_with_a_floor_answers_sold_out_distinctly_from_stale() {
    let server = server().await;
    let fence = fence(&server).await;
    let take = || FencedWrite::add_with_floor(-1, 0);
    fence
        .write("stock", T(1), FencedWrite::set("2"))
        .await
        .unwrap();
    assert_eq!(
        fence.write("stock", T(1), take()).await.unwrap(),
        WriteOutcome::Counter(1)
    );
    assert_eq!(
        fence.write("stock", T(1), take()).await.unwrap(),
        WriteOutcome::Counter(0)
    );
    // Sold out: not written, but the current holder's token is recorded...
    let out = fence.write("stock", T(2), take()).await.unwrap();
    assert_eq!(out, WriteOutcome::BelowFloor { current: 0 });
    assert_eq!(fence.highest("stock").await.unwrap(), Some(T(2)));
    // ...so the previous holder is now stale, which is another answer.
    assert_stale(fence.write("stock", T(1), take()).await, 1, 2);
    assert_eq!(fence.read("stock").await.unwrap().as_deref(), Some("0"));
    // A missing value counts as 0; an existing expiry is kept.
    let out = fence
        .write("fresh", T(1), FencedWrite::add_with_floor(-1, 0))
        .await;
    assert_eq!(out.unwrap(), WriteOutcome::BelowFloor { current: 0 });
    assert_eq!(
        fence
            .write("fresh", T(1), FencedWrite::add(3))
            .await
            .unwrap(),
        WriteOutcome::Counter(3)
    );
    let expiring = FencedWrite::set_expiring("10", Duration::from_secs(600));
    fence.write("timed", T(1), expiring).await.unwrap();
    fence
        .write("timed", T(1), FencedWrite::add(5))
        .await
        .unwrap();
    let pttl: i64 = raw(&mut admin(&server).await, &["PTTL", "timed"]).await;
    assert!(pttl > 0, "the expiry was dropped: PTTL {pttl}");
    assert_eq!(fence.read("timed").await.unwrap().as_deref(), Some("15"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_are_exact_and_a_refused_write_records_no_token() {
    let server = server().await;
    let fence = fence(&server).await;
    let above_doubles = "9007199254740993"; // 2^53 + 1
    fence
        .write("n", T(1), FencedWrite::set(above_doubles))
        .await
        .unwrap();
    let out = fence.write("n", T(1), FencedWrite::add(2)).await.unwrap();
    assert_eq!(out, WriteOutcome::Counter(9_007_199_254_740_995));
    let near_max = (i64::MAX - 1).to_string();
    fence
        .write("n", T(1), FencedWrite::set(near_max))
        .await
        .unwrap();
    let out = fence.write("n", T(1), FencedWrite::add(1)).await.unwrap();
    assert_eq!(out, WriteOutcome::Counter(i64::MAX));
    assert_invalid_write(
        fence.write("n", T(3), FencedWrite::add(1)).await,
        "overflows",
    );
    // Overflow is checked before the floor, as MemoryFence does.
    fence
        .write("m", T(1), FencedWrite::set(i64::MIN.to_string()))
        .await
        .unwrap();
    let below = FencedWrite::add_with_floor(-1, 0);
    assert_invalid_write(fence.write("m", T(3), below).await, "overflows");
    fence
        .write("s", T(1), FencedWrite::set("007"))
        .await
        .unwrap();
    assert_invalid_write(
        fence.write("s", T(3), FencedWrite::add(1)).await,
        "not an integer",
    );
    fence
        .write("h", T(1), FencedWrite::hash_set("f", "v"))
        .await
        .unwrap();
    assert_invalid_write(
        fence.write("h", T(3), FencedWrite::add(1)).await,
        "(hash), not an integer",
    );
    assert_invalid_write(
        fence
            .write("n", T(3), FencedWrite::hash_set("f", "v"))
            .await,
        "(string)",
    );
    for resource in ["n", "m", "s", "h"] {
        assert_eq!(
            fence.highest(resource).await.unwrap(),
            Some(T(1)),
            "{resource}"
        );
    }
    assert_eq!(fence.read("n").await.unwrap(), Some(i64::MAX.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_value_expires_and_its_token_stays() {
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    let write = FencedWrite::set_expiring("v", Duration::from_millis(300));
    fence.write("e", T(3), write).await.unwrap();
    let pttl: i64 = raw(&mut conn, &["PTTL", "e"]).await;
    assert!((1..=300).contains(&pttl), "PTTL {pttl}");
    let record_pttl: i64 = raw(&mut conn, &["PTTL", &fence.record_key("e").unwrap()]).await;
    assert_eq!(record_pttl, -1, "the record never expires");
    eventually(Duration::from_secs(3), "the value expired", || async {
        fence.read("e").await.unwrap().is_none()
    })
    .await;
    assert_eq!(fence.highest("e").await.unwrap(), Some(T(3)));
    assert_stale(fence.write("e", T(2), FencedWrite::set("late")).await, 2, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_fields_and_deletes_behave_as_in_memory() {
    let server = server().await;
    let fence = fence(&server).await;
    let memory = MemoryFence::new();
    let writes = [
        (T(1), FencedWrite::hash_set("b", "2")),
        (T(1), FencedWrite::hash_set("a", "1")),
        (T(2), FencedWrite::hash_set("b", "3")),
        (T(1), FencedWrite::hash_set("c", "stale")),
    ];
    for (token, write) in writes {
        let (redis, mem) = (
            fence.write("h", token, write.clone()).await,
            memory.write("h", token, write).await,
        );
        assert_eq!(format!("{redis:?}"), format!("{mem:?}"));
    }
    let read = fence.read("h").await.unwrap();
    assert_eq!(read, memory.read("h").await.unwrap());
    assert_eq!(read.as_deref(), Some(r#"{"a": "1", "b": "3"}"#));
    let fields: HashMap<String, String> = raw(&mut admin(&server).await, &["HGETALL", "h"]).await;
    assert_eq!(fields.len(), 2);
    // Delete keeps the token record.
    fence.write("h", T(4), FencedWrite::Delete).await.unwrap();
    assert_eq!(fence.read("h").await.unwrap(), None);
    assert_eq!(fence.highest("h").await.unwrap(), Some(T(4)));
    assert_stale(fence.write("h", T(3), FencedWrite::Delete).await, 3, 4);
    assert_stale(fence.write("h", T(3), FencedWrite::set("x")).await, 3, 4);
    assert_eq!(fence.read("h").await.unwrap(), None);
}
