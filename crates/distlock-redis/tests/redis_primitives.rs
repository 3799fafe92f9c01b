//! The semaphore, the read-write lock and the fair lock: round trips counted
//! by the server itself, and what only one client with several waiters shows
//! (the conformance suite gives every waiter a client of its own).

// Helpers outside #[test] fns: a failed step fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{admin, client, command_calls, delta, eventually, raw};
use distlock_core::{AcquireOptions, DistributedLock, Held, LockKey, SingleLease, Wait};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::servers::RedisServer;
use redis::aio::MultiplexedConnection;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CYCLES: u64 = 30;

fn long() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever)
}

/// The client commands among the server's counters: every script call and
/// anything sent besides (the commands the scripts run inside are left out).
fn client_commands(grown: HashMap<String, u64>) -> HashMap<String, u64> {
    grown
        .into_iter()
        .filter(|(name, _)| name.starts_with("eval") || name == "ping" || name == "script")
        .collect()
}

async fn fair_client(server: &RedisServer) -> RedisLock {
    RedisConfig::from_url(&format!("{}?fair=true", server.url()))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// `PING`s the server has answered so far (the launcher's readiness probe
/// was one).
async fn pings(conn: &mut MultiplexedConnection) -> u64 {
    command_calls(conn).await.get("ping").copied().unwrap_or(0)
}

/// Waits, while a lease is held, for the restart check that a held lease
/// brings (the subscriber connection comes up and the check `PING`s the
/// server once): one `PING` more than the `pings` counted before the lease,
/// so that it does not land in the counted cycles. Counting any `PING` at
/// all would pass at once on the launcher's readiness probe, and under load
/// the check then came during the cycles.
async fn restart_checked(conn: &MultiplexedConnection, pings: u64) {
    eventually(Duration::from_secs(5), "the restart check's PING", || {
        let mut conn = conn.clone();
        async move { self::pings(&mut conn).await == pings + 1 }
    })
    .await;
}

async fn one_server() -> RedisServer {
    common::server().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_costs_one_script_to_take_and_one_to_give_back() {
    let server = one_server().await;
    let sem = client(&server).await.semaphore().unwrap();
    let key = LockKey::new("sem-cycle").unwrap();
    // Warm-up: the connection and the counter's first seeding, held until the
    // restart check it brings has run.
    let mut conn = admin(&server).await;
    let pings = pings(&mut conn).await;
    let warm = sem.acquire(&key, 3, &long()).await.unwrap();
    restart_checked(&conn, pings).await;
    warm.release().await.unwrap();
    let before = command_calls(&mut conn).await;
    for _ in 0..CYCLES {
        let permit = sem.acquire(&key, 3, &long()).await.unwrap();
        assert_eq!(permit.slot(), 0, "the lowest slot is reused");
        permit.release().await.unwrap();
    }
    let grown = delta(&before, &command_calls(&mut conn).await);
    assert_eq!(
        client_commands(grown),
        HashMap::from([("evalsha".to_owned(), 2 * CYCLES)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_or_write_share_costs_one_script_each_way() {
    let server = one_server().await;
    let rw = client(&server).await.rwlock().unwrap();
    let key = LockKey::new("rw-cycle").unwrap();
    // Warm-up, held until the restart check it brings has run.
    let mut conn = admin(&server).await;
    let pings = pings(&mut conn).await;
    let warm = rw.write(&key, &long()).await.unwrap();
    restart_checked(&conn, pings).await;
    warm.release().await.unwrap();
    let before = command_calls(&mut conn).await;
    for _ in 0..CYCLES {
        rw.read(&key, &long())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        rw.write(&key, &long())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let grown = delta(&before, &command_calls(&mut conn).await);
    assert_eq!(
        client_commands(grown),
        HashMap::from([("evalsha".to_owned(), 4 * CYCLES)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_fair_cycle_costs_two_scripts() {
    let server = one_server().await;
    let lock = fair_client(&server).await;
    let key = LockKey::new("fair-cycle").unwrap();
    let mut conn = admin(&server).await;
    // Warm-up, held until the restart check it brings has run.
    let pings = pings(&mut conn).await;
    let lease = lock.acquire(&key, &long()).await.unwrap();
    restart_checked(&conn, pings).await;
    lease.release().await.unwrap();
    let before = command_calls(&mut conn).await;
    distlock_testkit::cycles(&lock, &key, &long(), CYCLES as usize)
        .await
        .unwrap();
    let grown = delta(&before, &command_calls(&mut conn).await);
    assert_eq!(
        client_commands(grown),
        HashMap::from([("evalsha".to_owned(), 2 * CYCLES)])
    );
}

/// Three waiters of one client: each is woken on its own channel when its
/// turn comes, so they get the lock in arrival order, all within a second of
/// the release, where waking by their place refresh (every 5 s / 3) would take
/// more than five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_of_one_client_are_served_in_arrival_order_by_push() {
    const WAITERS: usize = 3;
    let server = one_server().await;
    let holder = fair_client(&server).await;
    let waiters = Arc::new(fair_client(&server).await);
    let key = LockKey::new("fair-one-client").unwrap();
    let held = holder.acquire(&key, &long()).await.unwrap();
    let conn = admin(&server).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (lock, key, order) = (waiters.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let lease = lock.acquire(&key, &long()).await.unwrap();
            order.lock().unwrap().push(i);
            lease.release().await.unwrap();
        }));
        // Arrived: its place is in the queue.
        eventually(Duration::from_secs(5), "the waiter queued", || {
            let mut conn = conn.clone();
            let queue = "distlock:{fair-one-client}:queue";
            async move { raw::<usize>(&mut conn, &["LLEN", queue]).await == i + 1 }
        })
        .await;
    }
    held.release().await.unwrap();
    let all_served = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(1), all_served)
        .await
        .expect("every waiter was woken by push when its turn came");
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
}

/// Readers of one client waiting behind a writer all get in when it leaves:
/// the release message wakes one of them, and a reader that enters wakes the
/// readers at the head of the queue on their own channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_one_client_all_enter_when_the_writer_leaves() {
    const READERS: usize = 4;
    let server = one_server().await;
    let writer = client(&server).await.rwlock().unwrap();
    let readers = client(&server).await.rwlock().unwrap();
    let key = LockKey::new("rw-one-client").unwrap();
    let held = writer.write(&key, &long()).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let (rw, key) = (readers.clone(), key.clone());
        tasks.push(tokio::spawn(async move { rw.read(&key, &long()).await }));
    }
    let conn = admin(&server).await;
    eventually(Duration::from_secs(5), "the readers subscribed", || {
        let mut conn = conn.clone();
        async move {
            // The release channel and each reader's own.
            let channels: Vec<String> = raw(&mut conn, &["PUBSUB", "CHANNELS", "*"]).await;
            channels.len() == 1 + READERS
        }
    })
    .await;
    held.release().await.unwrap();
    let mut leases = Vec::new();
    for task in tasks {
        let read = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("every reader enters well before its 5 s nap ends");
        leases.push(read.unwrap().unwrap());
    }
    for lease in leases {
        lease.release().await.unwrap();
    }
}

/// A reader waiting behind a writer goes before a writer that arrived after
/// it (no reader starvation), and each is woken by push when its turn comes,
/// though both wait in one client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reader_goes_before_a_writer_that_arrived_after_it() {
    let server = one_server().await;
    let holder = client(&server).await.rwlock().unwrap();
    let waiters = client(&server).await.rwlock().unwrap();
    let key = LockKey::new("rw-arrival").unwrap();
    let first = holder.write(&key, &long()).await.unwrap();
    let conn = admin(&server).await;
    let queued = |n: usize| {
        let conn = conn.clone();
        async move {
            let mut conn = conn.clone();
            let queue = "distlock:{rw-arrival}:rw:queue";
            eventually(Duration::from_secs(5), "the waiter queued", || {
                let mut conn = conn.clone();
                async move { raw::<usize>(&mut conn, &["ZCARD", queue]).await == n }
            })
            .await;
            raw::<Vec<String>>(&mut conn, &["ZRANGE", queue, "0", "-1"]).await
        }
    };
    let (rw, k) = (waiters.clone(), key.clone());
    let reader = tokio::spawn(async move { rw.read(&k, &long()).await });
    queued(1).await;
    let (rw, k) = (waiters.clone(), key.clone());
    let writer = tokio::spawn(async move { rw.write(&k, &long()).await });
    let order = queued(2).await;
    assert!(
        order[0].starts_with("R:") && order[1].starts_with("W:"),
        "{order:?}"
    );
    first.release().await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(1), reader)
        .await
        .expect("the earlier reader is served first, by push")
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    let read_token = read.token();
    read.release().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(1), writer)
        .await
        .expect("the writer is served next, by push")
        .unwrap()
        .unwrap();
    assert!(write.token() > read_token);
    write.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_is_read_from_the_url_and_refuses_what_it_does_not_implement() {
    let url = "redis://127.0.0.1:6379?fair=true&restart_guard=30s";
    let refused = RedisConfig::from_url(url).unwrap_err().to_string();
    assert!(refused.contains("fair=true"), "{refused}");
    let bad = RedisConfig::from_url("redis://127.0.0.1:6379?fair=yes-please");
    assert!(bad.is_err(), "a non-boolean fair is refused");
    let server = one_server().await;
    assert!(fair_client(&server).await.capabilities().fifo);
    assert!(!client(&server).await.capabilities().fifo);
}
