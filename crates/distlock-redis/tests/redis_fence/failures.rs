//! Bad input, unreachable servers, dropped connections, passwords and RESP3.

use super::common::{admin, command_calls, delta, raw, server, servers};
use super::{T, assert_invalid_write, assert_stale, fence};
use distlock_core::{Fence, FencedWrite, LockError, WriteOutcome};
use distlock_redis::{FenceScript, RedisConfig};
use distlock_testkit::servers::RedisOptions;
use redis::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_any_io() {
    let server = server().await;
    let fence = fence(&server).await;
    let mut conn = admin(&server).await;
    let before = command_calls(&mut conn).await;
    let set = || FencedWrite::set("v");
    let big = "x".repeat(FencedWrite::MAX_PAYLOAD + 1);
    let long = "r".repeat(513);
    let key_errors = [
        fence.write("", T(1), set()).await,
        fence.write(&long, T(1), set()).await,
        fence.write("a}b", T(1), set()).await,
        fence.write("distlock:fence:{x}", T(1), set()).await,
        fence.read("").await.map(|_| WriteOutcome::Written),
        fence.highest(&long).await.map(|_| WriteOutcome::Written),
    ];
    for result in key_errors {
        assert!(
            matches!(result, Err(LockError::InvalidKey { .. })),
            "{result:?}"
        );
    }
    assert_invalid_write(
        fence.write("r", T(1), FencedWrite::set(big.clone())).await,
        "1048577 bytes",
    );
    assert_invalid_write(
        fence
            .write("r", T(1), FencedWrite::hash_set(&big, "v"))
            .await,
        "1048577 bytes",
    );
    let zero = FencedWrite::set_expiring("v", Duration::ZERO);
    assert_invalid_write(fence.write("r", T(1), zero).await, "under 1 ms");
    let forever = FencedWrite::set_expiring("v", Duration::MAX);
    assert_invalid_write(
        fence.write("r", T(1), forever).await,
        "longer than Redis accepts",
    );
    assert_invalid_write(FenceScript::new(&big), "1048577 bytes");
    let script = FenceScript::new("return 1").unwrap();
    let too_big = fence
        .write_script("r", T(1), &script, &[], &["a", &big])
        .await;
    assert_invalid_write(too_big, "ARGV[3] is 1048577 bytes");
    let bad_key = fence.write_script("r", T(1), &script, &[""], &[]).await;
    assert!(
        matches!(bad_key, Err(LockError::InvalidKey { .. })),
        "{bad_key:?}"
    );
    let after = command_calls(&mut conn).await;
    assert_eq!(
        delta(&before, &after),
        HashMap::new(),
        "no command reached the server"
    );
    let keys: i64 = raw(&mut conn, &["DBSIZE"]).await;
    assert_eq!(keys, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_at_once_and_nothing_is_written() {
    let persistent = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    let server = servers(1, persistent).await.pop().unwrap();
    let fence = fence(&server).await;
    fence
        .write("u", T(1), FencedWrite::set("before"))
        .await
        .unwrap();
    server.stop().await;
    for write in [
        FencedWrite::set("after"),
        FencedWrite::add(1),
        FencedWrite::Delete,
    ] {
        let started = Instant::now();
        let result = fence.write("u", T(2), write).await;
        assert!(
            matches!(result, Err(LockError::Unavailable { .. })),
            "{result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    let result = RedisConfig::from_url(&server.url())
        .unwrap()
        .connect_fence()
        .await;
    assert!(
        matches!(result, Err(LockError::Unavailable { .. })),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    server.restart().await.unwrap();
    assert_eq!(fence.read("u").await.unwrap().as_deref(), Some("before"));
    assert_eq!(fence.highest("u").await.unwrap(), Some(T(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_on_a_dropped_connection_is_not_resent_but_a_set_is() {
    let persistent = RedisOptions {
        aof: true,
        ..RedisOptions::default()
    };
    let server = servers(1, persistent).await.pop().unwrap();
    let fence = fence(&server).await;
    fence.write("c", T(1), FencedWrite::set("5")).await.unwrap();
    // The restart drops the fence's connection while it is idle.
    server.restart().await.unwrap();
    match fence.write("c", T(1), FencedWrite::add(1)).await {
        Err(LockError::Unavailable { source, .. }) => {
            assert!(
                source.to_string().contains("may have been applied"),
                "{source}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fence.read("c").await.unwrap().as_deref(), Some("5"));
    assert_eq!(
        fence.write("c", T(1), FencedWrite::add(1)).await.unwrap(),
        WriteOutcome::Counter(6)
    );
    server.restart().await.unwrap();
    fence.write("c", T(1), FencedWrite::set("7")).await.unwrap();
    assert_eq!(fence.read("c").await.unwrap().as_deref(), Some("7"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_and_passwords_work_and_debug_hides_the_password() {
    let options = RedisOptions {
        password: Some("s3cret-pw".into()),
        ..RedisOptions::default()
    };
    let server = servers(1, options).await.pop().unwrap();
    let config = RedisConfig::from_url(&format!("{}?protocol=resp3&namespace=app:", server.url()));
    let fence = config.unwrap().connect_fence().await.unwrap();
    assert!(!format!("{fence:?}").contains("s3cret"), "{fence:?}");
    assert_eq!(fence.record_key("x").unwrap(), "app:fence:{x}");
    fence.write("x", T(3), FencedWrite::set("1")).await.unwrap();
    assert_stale(fence.write("x", T(2), FencedWrite::add(1)).await, 2, 3);
    let out = fence
        .write("x", T(3), FencedWrite::add_with_floor(-2, 0))
        .await
        .unwrap();
    assert_eq!(out, WriteOutcome::BelowFloor { current: 1 });
    fence
        .write("y", T(3), FencedWrite::hash_set("f", "v"))
        .await
        .unwrap();
    assert_eq!(
        fence.read("y").await.unwrap().as_deref(),
        Some(r#"{"f": "v"}"#)
    );
    let script = FenceScript::new("return {ARGV[1], 7}").unwrap();
    let reply = fence
        .write_script("x", T(3), &script, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        reply,
        Value::Array(vec![Value::BulkString(b"3".to_vec()), Value::Int(7)])
    );
    let wrong = RedisConfig::from_url(&format!("redis://:wrong@127.0.0.1:{}/", server.port()));
    let result = wrong.unwrap().connect_fence().await;
    assert!(
        matches!(result, Err(LockError::Config { .. })),
        "{result:?}"
    );
}
