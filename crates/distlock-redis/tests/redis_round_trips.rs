//! Round trips and connections, counted by the server itself.

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, client, command_calls, delta, eventually, raw, server};
use distlock_core::{AcquireOptions, DistributedLock, LockKey, Wait};
use distlock_redis::RedisConfig;
use std::collections::HashMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_costs_exactly_two_commands() {
    const CYCLES: u64 = 50;
    let server = server().await;
    let lock = client(&server).await;
    let key = LockKey::new("cycle").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // Warm-up: connection set-up, the fence counter's first seeding, and the
    // subscriber connection a held lease keeps up, whose first connection is
    // followed by one restart check (a PING) while the lease is held.
    let mut conn = admin(&server).await;
    // The launcher's readiness probe was a PING too.
    let pings = command_calls(&mut conn).await.get("ping").copied();
    let lease = lock.acquire(&key, &opts).await.unwrap();
    let checked = pings.unwrap_or(0) + 1;
    eventually(
        Duration::from_secs(5),
        "the restart check after the subscriber connected",
        || {
            let mut conn = conn.clone();
            async move { command_calls(&mut conn).await.get("ping") == Some(&checked) }
        },
    )
    .await;
    lease.release().await.unwrap();
    let before = command_calls(&mut conn).await;
    distlock_testkit::cycles(&lock, &key, &opts, CYCLES as usize)
        .await
        .unwrap();
    let after = command_calls(&mut conn).await;
    // Client commands: one EVALSHA per acquire and per release, nothing else.
    // The rest are the commands the scripts run inside the server: the
    // acquire's SET NX, the counter's EXISTS, INCR and GET, the high-water's
    // GET and SET, the counter's PTTL and PEXPIRE (kept ttl + state_ttl);
    // the release's GET, DEL and PUBLISH.
    let expected: HashMap<String, u64> = [
        ("evalsha", 2 * CYCLES),
        ("set", 2 * CYCLES),
        ("exists", CYCLES),
        ("incr", CYCLES),
        ("get", 3 * CYCLES),
        ("pttl", CYCLES),
        ("pexpire", CYCLES),
        ("del", CYCLES),
        ("publish", CYCLES),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_owned(), calls))
    .collect();
    assert_eq!(delta(&before, &after), expected);
}

/// `CLIENT LIST` entries with subscriptions.
async fn subscriber_connections(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: String = raw(conn, &["CLIENT", "LIST"]).await;
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|f| f.strip_prefix("sub=").is_some_and(|n| n != "0"))
        })
        .count()
}

async fn channels(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    raw(conn, &["PUBSUB", "CHANNELS", "*"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_subscriber_connection_and_the_last_to_leave_unsubscribes() {
    let server = server().await;
    let holder = client(&server).await;
    let waiters = std::sync::Arc::new(client(&server).await);
    let long = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever);
    let keys: Vec<LockKey> = (0..3)
        .map(|i| LockKey::new(format!("k{i}")).unwrap())
        .collect();
    let mut held = Vec::new();
    for key in &keys {
        held.push(holder.acquire(key, &long).await.unwrap());
    }
    // Four waiters on each of three keys, all in one client.
    let mut tasks = Vec::new();
    for key in &keys {
        for _ in 0..4 {
            let (lock, key, opts) = (waiters.clone(), key.clone(), long.clone());
            tasks.push(tokio::spawn(async move { lock.acquire(&key, &opts).await }));
        }
    }
    let mut conn = admin(&server).await;
    eventually(Duration::from_secs(5), "three channels subscribed", || {
        let mut conn = conn.clone();
        async move { channels(&mut conn).await.len() == 3 }
    })
    .await;
    assert_eq!(
        subscriber_connections(&mut conn).await,
        1,
        "one subscriber connection for twelve waiters"
    );
    for task in &tasks {
        task.abort();
    }
    eventually(
        Duration::from_secs(5),
        "channels unsubscribed after the waiters left",
        || {
            let mut conn = conn.clone();
            async move { channels(&mut conn).await.is_empty() }
        },
    )
    .await;
    for lease in held {
        lease.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_off_to_a_waiter_by_push_not_by_polling() {
    let server = server().await;
    let a = client(&server).await;
    let b = client(&server).await;
    let key = LockKey::new("handoff").unwrap();
    let long = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever);
    let held = a.acquire(&key, &long).await.unwrap();
    let (k, o) = (key.clone(), long.clone());
    let waiter = tokio::spawn(async move {
        b.acquire(&k, &o)
            .await
            .map(|l| (std::time::Instant::now(), l))
    });
    let mut conn = admin(&server).await;
    // Parked: subscribed, and its attempt after subscribing (the second to run
    // PTTL on the lock inside the script, after the holder's grant ran one on
    // its fence counter) is done.
    eventually(Duration::from_secs(5), "waiter parked", || {
        let mut conn = conn.clone();
        async move {
            let parked = command_calls(&mut conn).await.get("pttl") == Some(&3);
            parked && channels(&mut conn).await.len() == 1
        }
    })
    .await;
    let before = command_calls(&mut conn).await;
    let released_at = std::time::Instant::now();
    held.release().await.unwrap();
    let (acquired_at, lease) = waiter.await.unwrap().unwrap();
    let after = command_calls(&mut conn).await;
    // The waiter slept until the message (its nap was the holder's 30 s ttl,
    // capped at 5 s) and then needed one attempt.
    assert!(
        acquired_at - released_at < Duration::from_secs(1),
        "hand-off took {:?}",
        acquired_at - released_at
    );
    assert_eq!(
        delta(&before, &after).get("evalsha"),
        Some(&2),
        "release + one acquire attempt"
    );
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_clients_acquire_and_wake_waiters_too() {
    let server = server().await;
    let url = format!("{}?protocol=resp3", server.url());
    let a = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let b = RedisConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("resp3").unwrap();
    let long = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever);
    let held = a.acquire(&key, &long).await.unwrap();
    let (k, o) = (key.clone(), long.clone());
    let waiter = tokio::spawn(async move { b.acquire(&k, &o).await });
    let conn = admin(&server).await;
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        let mut conn = conn.clone();
        async move { channels(&mut conn).await.len() == 1 }
    })
    .await;
    held.release().await.unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    lease.release().await.unwrap();
}

/// The benchmarks' floor is the two scripts and nothing else, and the
/// server's request counter (`total_reads_processed`) grows by exactly the
/// requests sent, where `total_commands_processed` would count every command
/// the scripts run inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_is_two_evalsha_and_the_request_counter_counts_requests() {
    const CYCLES: u64 = 20;
    let server = server().await;
    let lock = client(&server).await;
    let inspect = lock.inspect().unwrap();
    let key = LockKey::new("floor").unwrap();
    let ttl = Duration::from_secs(30);
    // Warm-up: the counter's first seeding, and the connection itself.
    inspect.floor_cycle(&key, ttl).await.unwrap();
    let mut conn = admin(&server).await;
    let before = command_calls(&mut conn).await;
    let counted_before = inspect.server_requests().await.unwrap().unwrap();
    for _ in 0..CYCLES {
        inspect.floor_cycle(&key, ttl).await.unwrap();
    }
    let counted_after = inspect.server_requests().await.unwrap().unwrap();
    let grown = delta(&before, &command_calls(&mut conn).await);
    let client_commands: HashMap<String, u64> = grown
        .into_iter()
        .filter(|(name, _)| name.starts_with("eval") || name == "ping")
        .collect();
    assert_eq!(
        client_commands,
        HashMap::from([("evalsha".to_owned(), 2 * CYCLES)])
    );
    // The floor's requests, and the second reading itself.
    assert_eq!(counted_after - counted_before, 2 * CYCLES + 1);
    // A held key is refused, not waited for.
    let held = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    let refused = inspect.floor_cycle(&key, ttl).await;
    assert!(
        matches!(refused, Err(distlock_core::LockError::Busy { .. })),
        "{refused:?}"
    );
    held.release().await.unwrap();
}
