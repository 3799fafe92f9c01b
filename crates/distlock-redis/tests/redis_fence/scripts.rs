//! User scripts, one `EVALSHA` per write, `NOSCRIPT`, and the key layout.

use super::common::{admin, command_calls, delta, raw, server};
use super::{T, assert_invalid_write, assert_stale, fence};
use distlock_core::{Fence, FencedWrite, LockError, WriteOutcome};
use distlock_redis::FenceScript;
use redis::Value;
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_body_runs_only_when_admitted_and_sees_the_documented_keys_and_argv() {
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    let script = FenceScript::new(
        "redis.call('RPUSH', KEYS[3], ARGV[2])\n\
         return {KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], #KEYS, #ARGV}",
    )
    .unwrap();
    let (resource, log) = ("{o1}:total", "{o1}:log");
    let reply = fence
        .write_script(resource, T(10), &script, &[log], &["x", "y"])
        .await
        .unwrap();
    let record = fence.record_key(resource).unwrap();
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let expected = [resource, &record, log, "10", "x", "y"]
        .map(bulk)
        .into_iter();
    let expected: Vec<Value> = expected.chain([Value::Int(3), Value::Int(3)]).collect();
    assert_eq!(reply, Value::Array(expected));
    assert_eq!(fence.highest(resource).await.unwrap(), Some(T(10)));
    assert_stale(
        fence
            .write_script(resource, T(9), &script, &[log], &["z", ""])
            .await,
        9,
        10,
    );
    let entries: Vec<String> = raw(&mut conn, &["LRANGE", log, "0", "-1"]).await;
    assert_eq!(entries, ["x"], "the refused body did not run");
    // A body that returns nothing gives nil; failures are the script's fault.
    let nothing = FenceScript::new("redis.call('SET', KEYS[1], ARGV[1])").unwrap();
    let reply = fence
        .write_script(resource, T(11), &nothing, &[], &[])
        .await
        .unwrap();
    assert_eq!(reply, Value::Nil);
    let broken = FenceScript::new("return (").unwrap();
    assert_invalid_write(
        fence.write_script(resource, T(12), &broken, &[], &[]).await,
        "does not compile",
    );
    assert_eq!(
        fence.highest(resource).await.unwrap(),
        Some(T(11)),
        "nothing ran"
    );
    let failing = FenceScript::new("return redis.call('HSET', KEYS[1], 'f', 'v')").unwrap();
    assert_invalid_write(
        fence
            .write_script(resource, T(12), &failing, &[], &[])
            .await,
        "WRONGTYPE",
    );
    // The token is recorded before the body runs, so a failing body leaves it.
    assert_eq!(fence.highest(resource).await.unwrap(), Some(T(12)));
    let refusing = FenceScript::new("return redis.error_reply('NOPE sold out')").unwrap();
    assert_invalid_write(
        fence
            .write_script(resource, T(13), &refusing, &[], &[])
            .await,
        "NOPE sold out",
    );
    assert_eq!(fence.highest(resource).await.unwrap(), Some(T(13)));
    assert_eq!(fence.read(resource).await.unwrap().as_deref(), Some("11"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_still_work_after_script_flush() {
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    let script = FenceScript::new("return redis.call('INCR', KEYS[1])").unwrap();
    fence.write("f", T(1), FencedWrite::set("1")).await.unwrap();
    fence
        .write_script("f", T(1), &script, &[], &[])
        .await
        .unwrap();
    let _: () = raw(&mut conn, &["SCRIPT", "FLUSH"]).await;
    let before = command_calls(&mut conn).await;
    fence.write("f", T(2), FencedWrite::add(1)).await.unwrap();
    let reply = fence
        .write_script("f", T(2), &script, &[], &[])
        .await
        .unwrap();
    assert_eq!(reply, Value::Int(4));
    assert_eq!(fence.read("f").await.unwrap().as_deref(), Some("4"));
    let after = command_calls(&mut conn).await;
    let calls = delta(&before, &after);
    // Each of the three scripts (add, the user's, read): EVALSHA answered
    // NOSCRIPT, SCRIPT LOAD, EVALSHA again.
    assert_eq!(
        (calls.get("evalsha"), calls.get("script|load")),
        (Some(&6), Some(&3)),
        "{calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fenced_write_is_one_evalsha() {
    const ROUNDS: u64 = 20;
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    let token = T(1_700_000_000_000_000);
    fence
        .write("rt:stock", token, FencedWrite::set("1000"))
        .await
        .unwrap();
    let round = || async {
        fence
            .write("rt:value", token, FencedWrite::set("v"))
            .await
            .unwrap();
        let taken = fence
            .write("rt:stock", token, FencedWrite::add_with_floor(-1, 0))
            .await;
        assert!(matches!(taken, Ok(WriteOutcome::Counter(_))), "{taken:?}");
        fence
            .write("rt:hash", token, FencedWrite::hash_set("f", "v"))
            .await
            .unwrap();
        fence
            .write("rt:gone", token, FencedWrite::Delete)
            .await
            .unwrap();
    };
    round().await; // warm-up: the records' first writes
    let before = command_calls(&mut conn).await;
    for _ in 0..ROUNDS {
        round().await;
    }
    let after = command_calls(&mut conn).await;
    // From the client: one EVALSHA per write. The rest run inside the scripts:
    // each reads its record (an equal token needs no new record), Add its value.
    let expected: HashMap<String, u64> = [
        ("evalsha", 4 * ROUNDS),
        ("get", 5 * ROUNDS),
        ("set", ROUNDS),
        ("incrby", ROUNDS),
        ("hset", ROUNDS),
        ("del", ROUNDS),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_owned(), calls))
    .collect();
    assert_eq!(delta(&before, &after), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_resource_records_its_token_under_its_own_record_key() {
    // That the record shares the resource's Cluster slot is a unit test of
    // `keys.rs` (against the specification's reference values); here, that the
    // script writes the token where `record_key` says.
    let server = server().await;
    let fence = fence(&server).await;
    for resource in ["stock", "{user42}:cart", "a{b}c", "{{x}y", "x{", "}{t}"] {
        let record = fence.record_key(resource).unwrap();
        fence
            .write(resource, T(1), FencedWrite::set("v"))
            .await
            .unwrap();
        let stored: String = raw(&mut admin(&server).await, &["GET", &record]).await;
        assert_eq!(stored, "1", "{resource} → {record}");
    }
    match fence.write("a}b", T(1), FencedWrite::set("v")).await {
        Err(LockError::InvalidKey { reason }) => assert!(reason.contains("hash tag"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
