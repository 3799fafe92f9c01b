//! `for_update`: the lock lives and dies with the holder's connection.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, LockError, LockKey, LossReason, Wait};
use distlock_mysql::{MySqlConfig, Strategy};
use sqlx::{Connection, MySqlConnection};
use std::time::{Duration, Instant};
use support::{
    client, eventually, holder_session, queued_sessions, root_value, row_locked, server,
};

/// An operator's `KILL CONNECTION` on the holder's session makes `lost()` fire
/// (at the next keepalive) and lets the queued waiter in, with a higher token.
#[tokio::test(flavor = "multi_thread")]
async fn kill_connection_fires_lost_and_hands_over_with_a_higher_token() {
    let server = server().await;
    let (a, b) = (
        client(&server, Strategy::ForUpdate, "locks").await,
        client(&server, Strategy::ForUpdate, "locks").await,
    );
    let key = LockKey::new("jobs/kill-me").unwrap();
    let ttl = Duration::from_secs(3);
    let held = a
        .acquire(&key, &AcquireOptions::new().ttl(ttl))
        .await
        .unwrap();
    let lost = held.lost();
    let waiter_key = key.clone();
    let waiter = tokio::spawn(async move {
        let opts = AcquireOptions::new()
            .ttl(ttl)
            .wait(Wait::For(Duration::from_secs(20)));
        b.acquire(&waiter_key, &opts).await
    });
    eventually(Duration::from_secs(10), "the waiter queues", async || {
        queued_sessions(&server, "locks").await == 1
    })
    .await;
    let holder = holder_session(&server, "locks", "jobs/kill-me").await;
    let killed_at = Instant::now();
    server
        .exec_root(&format!("KILL CONNECTION {holder};"))
        .await
        .unwrap();

    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the lock once the holder's session is gone")
        .unwrap()
        .unwrap();
    assert!(
        next.token() > held.token(),
        "token {} not above {}",
        next.token(),
        held.token()
    );
    // The keepalive runs every ttl/3: the loss shows within one interval (and slack).
    let reason = tokio::time::timeout(ttl, lost)
        .await
        .expect("lost() fires after the kill");
    assert_eq!(reason, LossReason::Revoked);
    assert!(
        killed_at.elapsed() < ttl,
        "lost() took {:?}",
        killed_at.elapsed()
    );
    assert!(!held.is_held());
    next.release().await.unwrap();
}

/// `Wait::No` on a held row answers at once with `Busy` (NOWAIT), a bounded wait
/// ends on time, and a waiter given up on leaves the server's lock queue at once
/// (killed), long before its server-side wait would end.
#[tokio::test(flavor = "multi_thread")]
async fn nowait_is_busy_at_once_and_abandoned_waiters_leave_the_queue() {
    let server = server().await;
    let (a, b) = (
        client(&server, Strategy::ForUpdate, "locks").await,
        client(&server, Strategy::ForUpdate, "locks").await,
    );
    let key = LockKey::new("jobs/busy").unwrap();
    let held = a
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let started = Instant::now();
    let busy = b.try_acquire(&key, &AcquireOptions::new()).await.unwrap();
    assert!(busy.is_none());
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "NOWAIT took {:?}",
        started.elapsed()
    );

    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_millis(1300)));
    let started = Instant::now();
    assert!(matches!(
        b.acquire(&key, &opts).await,
        Err(LockError::Timeout { .. })
    ));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1295) && waited < Duration::from_millis(2000),
        "waited {waited:?}"
    );

    // Wait::Forever waits 10 s per statement on the server: only the kill can end
    // the abandoned waiter sooner.
    let forever = AcquireOptions::new().wait(Wait::Forever);
    let cancelled =
        tokio::time::timeout(Duration::from_millis(500), b.acquire(&key, &forever)).await;
    assert!(cancelled.is_err(), "the waiter got a held lock");
    eventually(
        Duration::from_secs(3),
        "abandoned waiters are killed",
        async || queued_sessions(&server, "locks").await == 0,
    )
    .await;
    held.release().await.unwrap();
    let next = b.try_acquire(&key, &AcquireOptions::new()).await.unwrap();
    assert!(next.is_some(), "no ghost waiter took the lock");
}

/// An abandoned lease keeps its row for the ttl; then its connection goes back
/// to the pool only once the server confirmed the transaction over (else it is
/// closed). With a single holder connection, the next lease must get a usable
/// connection that holds nothing else: the abandoned row is free for others.
/// The server's idle timeout (`wait_timeout` = the ttl) ends the idle session
/// at about the moment the cleanup runs, so the cleanup finds it alive (rolls
/// back, checks, returns it) or closed (closes it), whichever won the race.
#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_session_never_hands_an_open_transaction_to_the_pool() {
    let server = server().await;
    for (round, ttl) in [Duration::from_secs(1), Duration::from_secs(2)]
        .into_iter()
        .enumerate()
    {
        let single = MySqlConfig::from_url(&server.url())
            .unwrap()
            .strategy(Strategy::ForUpdate)
            .table("locks")
            .held_connections(1)
            .connect()
            .await
            .unwrap();
        let other = client(&server, Strategy::ForUpdate, "locks").await;
        let (abandoned, next) = (format!("abandoned-{round}"), format!("next-{round}"));
        let (abandoned, next) = (
            LockKey::new(abandoned).unwrap(),
            LockKey::new(next).unwrap(),
        );
        let opts = AcquireOptions::new().ttl(ttl);
        let lease = single.acquire(&abandoned, &opts).await.unwrap();
        let first_session = holder_session(&server, "locks", abandoned.as_str()).await;
        lease.abandon();
        assert!(
            other
                .try_acquire(&abandoned, &opts)
                .await
                .unwrap()
                .is_none(),
            "the abandoned row stays held for its ttl"
        );

        // Waits for the one holder connection, then must be able to use it.
        let waiting = opts.clone().wait(Wait::For(Duration::from_secs(10)));
        let lease = single
            .acquire(&next, &waiting)
            .await
            .unwrap_or_else(|e| panic!("ttl {ttl:?}: the pool's next connection failed: {e}"));
        let next_session = holder_session(&server, "locks", next.as_str()).await;
        println!(
            "ttl {ttl:?}: the next lease {} the abandoned session's connection",
            if next_session == first_session {
                "reused"
            } else {
                "did not reuse"
            }
        );
        assert!(
            !row_locked(&server, "locks", abandoned.as_str()).await,
            "ttl {ttl:?}: the pool's next connection still holds the abandoned row"
        );
        let taken = other.try_acquire(&abandoned, &opts).await.unwrap();
        assert!(taken.is_some(), "ttl {ttl:?}: the abandoned row is free");
        lease.release().await.unwrap();
        taken.unwrap().release().await.unwrap();
    }
}

/// Two waiters queued behind a crashed holder, each with a ttl (1 s) shorter
/// than its time in the queue: both get the lock in turn, with rising tokens.
/// A lease's validity must start when the server granted the row lock, not when
/// the waiter's locking statement was sent (that made a waiter that queued
/// longer than its ttl give up the lock it had just won, as `Timeout`, after
/// about a second of a 60 s wait).
#[tokio::test(flavor = "multi_thread")]
async fn waiters_queued_longer_than_their_ttl_still_take_the_lock() {
    let server = server().await;
    let key = LockKey::new("jobs/queued-past-ttl").unwrap();
    let ttl = Duration::from_secs(1);
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Wait::For(Duration::from_secs(60)));
    let crashed = client(&server, Strategy::ForUpdate, "locks")
        .await
        .acquire(&key, &opts)
        .await
        .unwrap();
    let crashed_token = crashed.token();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let (lock, key, opts) = (
            client(&server, Strategy::ForUpdate, "locks").await,
            key.clone(),
            opts.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let lease = lock.acquire(&key, &opts).await?;
            let token = lease.token();
            // Hold past the ttl (renewed), so the other waiter queues longer too.
            tokio::time::sleep(ttl * 2).await;
            assert!(lease.is_held(), "a renewed lease was lost");
            lease.release().await?;
            Ok::<_, LockError>(token)
        }));
    }
    eventually(Duration::from_secs(10), "both waiters queue", async || {
        queued_sessions(&server, "locks").await == 2
    })
    .await;
    crashed.abandon();
    let mut tokens = Vec::new();
    for waiter in waiters {
        let token = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("each waiter gets the lock in turn")
            .unwrap()
            .unwrap_or_else(|e| panic!("a waiter queued past its ttl failed: {e}"));
        tokens.push(token);
    }
    assert!(
        tokens.iter().all(|t| *t > crashed_token) && tokens[0] != tokens[1],
        "tokens {tokens:?} not distinct and above the crashed holder's {crashed_token}"
    );
}

/// The row lock is granted, but the fence counter's row is held by another
/// transaction for longer than the ttl, so the server ends the idle holder
/// session (its `wait_timeout` is the ttl) before the lease is handed over.
/// The acquire must notice the session gone and take the lock again on a new
/// one, not fail with `Unavailable` from a healthy server (an election under
/// load in containers lost a campaign this way: "Connection reset by peer").
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_session_ended_before_handover_is_replaced() {
    let server = server().await;
    let lock = client(&server, Strategy::ForUpdate, "locks").await;
    let key = LockKey::new("jobs/slow-fence").unwrap();
    let ttl = Duration::from_secs(1);
    let opts = AcquireOptions::new()
        .ttl(ttl)
        .wait(Wait::For(Duration::from_secs(20)));
    // Creates the lock row and its counter row.
    let first = lock.acquire(&key, &opts).await.unwrap();
    let first_token = first.token();
    first.release().await.unwrap();

    let counter = "CONCAT('jobs/slow-fence', X'1E')";
    let hold_counter = format!(
        "BEGIN; SELECT fence FROM distlock.locks WHERE name = {counter} FOR UPDATE; \
         DO SLEEP(3); ROLLBACK;"
    );
    let acquire_behind_it = async {
        eventually(
            Duration::from_secs(10),
            "the counter row is locked",
            async || {
                let sql = format!(
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                 SELECT COUNT(*) FROM distlock.locks WHERE name = {counter} FOR UPDATE SKIP LOCKED;"
                );
                root_value(&server, &sql).await == "0"
            },
        )
        .await;
        lock.acquire(&key, &opts).await
    };
    let (held_counter, acquired) = tokio::join!(server.exec_root(&hold_counter), acquire_behind_it);
    held_counter.unwrap();
    let lease =
        acquired.unwrap_or_else(|e| panic!("an acquire whose first session ended failed: {e}"));
    // The first try raised the counter too, then lost its session: the lease
    // comes from a second try.
    assert_eq!(
        lease.token().get(),
        first_token.get() + 2,
        "the lease is not from a second try after the first session ended"
    );
    assert!(lease.is_held(), "the replacement lease is not held");
    assert!(
        row_locked(&server, "locks", key.as_str()).await,
        "nobody holds the row lock after the acquire returned"
    );
    lease.release().await.unwrap();
}

/// A collection of idle names locks the rows it deletes and names no session
/// in them, for a few statements: `Inspect::holder` waits for it to commit
/// (every collection holds the floor row meanwhile) instead of reporting a
/// holder that is not one.
#[tokio::test(flavor = "multi_thread")]
async fn a_collection_in_progress_is_not_reported_as_a_holder() {
    let server = server().await;
    let lock = client(&server, Strategy::ForUpdate, "swept").await;
    let key = LockKey::new("jobs/swept").unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    lease.release().await.unwrap();
    // The collection's statements, as the client sends them.
    let mut collection = MySqlConnection::connect(&server.url()).await.unwrap();
    let steps = [
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "BEGIN",
        "SELECT floor FROM swept_hw WHERE id = 0 FOR UPDATE",
        "SELECT name FROM swept WHERE name IN ('jobs/swept', CONCAT('jobs/swept', 0x1E)) \
         FOR UPDATE SKIP LOCKED",
    ];
    for step in steps {
        sqlx::raw_sql(step).execute(&mut collection).await.unwrap();
    }
    let inspector = lock.clone();
    let holder = tokio::spawn(async move {
        let inspect = inspector.inspect().expect("an inspector");
        inspect.holder(&key).await
    });
    let floor_waits = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                       WHERE INFO LIKE 'SELECT floor FROM `swept_hw`%LOCK IN SHARE MODE%';";
    eventually(Duration::from_secs(10), "the look waits", async || {
        holder.is_finished() || root_value(&server, floor_waits).await == "1"
    })
    .await;
    let delete = "DELETE FROM swept WHERE name IN ('jobs/swept', CONCAT('jobs/swept', 0x1E)); \
                  COMMIT";
    sqlx::raw_sql(delete)
        .execute(&mut collection)
        .await
        .unwrap();
    let seen = holder.await.unwrap().unwrap();
    assert!(seen.is_none(), "a collection reported as {seen:?}");
}
