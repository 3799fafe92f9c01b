//! `advisory`: the lock dies with its session. An operator (or a failover
//! tool) ending the holder's connection from the server side fires `lost()` and
//! frees the lock for the next holder, whose token is higher; a name whose
//! advisory key is recorded for another name is refused, never shared; a
//! force-unlock ends only a session it can name by pid and start; waiters
//! wait in the server's lock queue, which a cancelled one leaves.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, DynLock, Lease, LockError, LockKey, LossReason, Wait};
use distlock_postgres::{PostgresConfig, Strategy, advisory_key};
use distlock_testkit::servers::PostgresServer;
use sqlx::postgres::PgListener;
use std::time::Duration;
use support::{admin_value, client, eventually, nothing_before, server};

#[tokio::test(flavor = "multi_thread")]
async fn terminating_the_holders_backend_fires_lost_and_frees_the_lock() {
    let server = server().await;
    let (a, b) = (
        client(&server, Strategy::Advisory, "killed").await,
        client(&server, Strategy::Advisory, "killed").await,
    );
    let key = LockKey::new("jobs/nightly").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(3));
    let lease = a.acquire(&key, &opts).await.unwrap();
    let holder = a
        .inspect()
        .unwrap()
        .holder(&key)
        .await
        .unwrap()
        .expect("a holder");
    let pid: i32 = holder
        .owner
        .strip_prefix("session ")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("holder names no session: {holder:?}"));
    assert_eq!(holder.token, Some(lease.token()));
    let killed = admin_value(&server, &format!("SELECT pg_terminate_backend({pid});")).await;
    assert_eq!(killed, "t", "the holder's backend was terminated");
    // The next keepalive (every ttl/3) finds the session gone.
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost() fires after the holder's session ended");
    assert_eq!(
        reason,
        LossReason::Revoked,
        "the keepalive found the session gone"
    );
    assert!(!lease.is_held());
    let next = b
        .acquire(&key, &opts.clone().wait(Wait::For(Duration::from_secs(2))))
        .await
        .unwrap();
    assert!(
        next.token() > lease.token(),
        "{} > {}",
        next.token(),
        lease.token()
    );
    assert!(matches!(lease.release().await, Err(LockError::Lost { .. })));
    next.release().await.unwrap();
    eventually(
        Duration::from_secs(5),
        "no advisory lock left",
        async || {
            a.inspect()
                .unwrap()
                .residue("jobs/")
                .await
                .unwrap()
                .is_empty()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_whose_key_is_recorded_for_another_name_is_refused() {
    let server = server().await;
    let lock = client(&server, Strategy::Advisory, "collide").await;
    let key = LockKey::new("reports/daily").unwrap();
    // A true SHA-256 prefix collision cannot be found for a test; plant the row
    // another name in use with the same key would have (used just now: an
    // idle one is collected, and its key free for the next name).
    let planted = advisory_key("distlock", &key);
    server
        .exec_admin(&format!(
            "INSERT INTO collide (namespace, name, fence, lock_key, expires_at) \
             VALUES ('distlock', 'other/name', 1, {planted}, now());"
        ))
        .await
        .unwrap();
    let opts = AcquireOptions::new().wait(Wait::No);
    match lock.acquire(&key, &opts).await {
        Err(LockError::Config { reason, .. }) => {
            assert!(reason.contains("reports/daily"), "{reason}");
            assert!(reason.contains("other/name"), "{reason}");
        }
        other => panic!("expected the collision to be refused, got {other:?}"),
    }
    // Nothing stays held: the session that may have taken the key was ended.
    eventually(Duration::from_secs(5), "the key is free", async || {
        admin_value(
            &server,
            &format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid::BIGINT = ({planted} & 4294967295);"),
        )
        .await
            == "0"
    })
    .await;
}

/// A name's row in use that does not record its advisory key (a row written
/// by hand) is not raised by the acquire's own statement: the look for
/// another name with that key runs, records the key, and the token still
/// rises above the row's.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_without_its_key_is_checked_then_raised_and_records_it() {
    let server = server().await;
    let lock = client(&server, Strategy::Advisory, "unkeyed").await;
    let key = LockKey::new("reports/weekly").unwrap();
    server
        .exec_admin(
            "INSERT INTO unkeyed (namespace, name, fence, lock_key, expires_at) \
             VALUES ('distlock', 'reports/weekly', 41, NULL, now());",
        )
        .await
        .unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    assert_eq!(lease.token().get(), 42, "the planted row raised");
    let recorded = admin_value(
        &server,
        "SELECT lock_key FROM unkeyed WHERE name = 'reports/weekly';",
    )
    .await;
    assert_eq!(recorded, advisory_key("distlock", &key).to_string());
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn force_unlock_ends_a_holder_of_another_role_only_when_it_can_name_that_session() {
    let server = server().await;
    let operator = client(&server, Strategy::Advisory, "roles").await;
    server
        .exec_admin(
            "CREATE ROLE other LOGIN PASSWORD 'other-secret';
             GRANT CREATE ON SCHEMA public TO other;
             GRANT ALL ON roles, roles_hw TO other;
             GRANT pg_signal_backend TO distlock;",
        )
        .await
        .unwrap();
    let url = format!("postgres://other:other-secret@{}/distlock", server.addr());
    let holder = PostgresConfig::from_url(&url)
        .unwrap()
        .strategy(Strategy::Advisory)
        .table("roles")
        .connect()
        .await
        .expect("the other role connects");
    let key = LockKey::new("jobs/shared").unwrap();
    let lease = holder
        .acquire(&key, &AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .unwrap();
    let inspect = operator.inspect().unwrap();
    // The operator may signal the holder but cannot see when its session
    // started, so it cannot tell that session from one that reused its pid.
    match inspect.delete_holder(&key).await {
        Err(LockError::Config { reason, .. }) => {
            assert!(reason.contains("pg_read_all_stats"), "{reason}");
            assert!(reason.contains("jobs/shared"), "{reason}");
        }
        other => panic!("expected a refusal naming the missing right, got {other:?}"),
    }
    let still = inspect.holder(&key).await.unwrap().expect("still held");
    assert_eq!(
        still.token,
        Some(lease.token()),
        "the refused force-unlock ended nothing"
    );
    server
        .exec_admin("GRANT pg_read_all_stats TO distlock;")
        .await
        .unwrap();
    assert!(
        inspect.delete_holder(&key).await.unwrap(),
        "the holder's session was ended"
    );
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost() fires after the holder's session ended");
    assert_eq!(reason, LossReason::Revoked);
}

/// Sessions waiting in the server's queue for `key`'s advisory lock.
async fn queued(server: &PostgresServer, key: &LockKey) -> u64 {
    let key = advisory_key("distlock", key);
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
         AND NOT granted AND classid::BIGINT = ({key} >> 32) & 4294967295 \
         AND objid::BIGINT = {key} & 4294967295;"
    );
    admin_value(server, &sql).await.parse().unwrap()
}

/// `lock`'s acquire of `key` in a task, once it waits in the server's queue.
async fn queue_behind(
    server: &PostgresServer,
    lock: &DynLock,
    key: &LockKey,
    opts: &AcquireOptions,
) -> tokio::task::JoinHandle<Result<Lease, LockError>> {
    let waiter = tokio::spawn({
        let (lock, key, opts) = (lock.clone(), key.clone(), opts.clone());
        async move { lock.acquire(&key, &opts).await }
    });
    eventually(Duration::from_secs(5), "the waiter queued", async || {
        queued(server, key).await == 1
    })
    .await;
    waiter
}

/// A wait that runs out after the server granted the advisory lock (the
/// statement's `lock_timeout` fired while its counter bump waited for the
/// row, which another transaction held) gives the lock back: the attempt is
/// refused, and no pooled session keeps the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_wait_that_runs_out_after_the_grant_gives_the_lock_back() {
    let server = server().await;
    let (a, b) = (
        client(&server, Strategy::Advisory, "granted").await,
        client(&server, Strategy::Advisory, "granted").await,
    );
    let key = LockKey::new("reports/monthly").unwrap();
    a.acquire(&key, &AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let hold_row = server.exec_admin(
        "BEGIN; SELECT fence FROM granted WHERE name = 'reports/monthly' FOR UPDATE; \
         SELECT pg_sleep(3) AS row_held; COMMIT;",
    );
    let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%AS row_held%' \
                    AND state = 'active' AND pid <> pg_backend_pid();";
    let attempt = async {
        eventually(Duration::from_secs(5), "the row is held", async || {
            admin_value(&server, sleeping).await == "1"
        })
        .await;
        let wait = AcquireOptions::new().wait(Wait::For(Duration::from_millis(300)));
        a.acquire(&key, &wait).await
    };
    let (row_held, attempted) = tokio::join!(hold_row, attempt);
    row_held.unwrap();
    match attempted {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected the wait to run out, got {other:?}"),
    }
    let held = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND objid::BIGINT = ({} & 4294967295);",
        advisory_key("distlock", &key)
    );
    assert_eq!(
        admin_value(&server, &held).await,
        "0",
        "a session kept the key"
    );
    let next = b.acquire(&key, &AcquireOptions::new().wait(Wait::No)).await;
    next.expect("the key is free").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_wait_in_the_servers_queue_and_a_cancelled_one_leaves_it() {
    let server = server().await;
    let (a, b) = (
        client(&server, Strategy::Advisory, "queue").await,
        client(&server, Strategy::Advisory, "queue").await,
    );
    let mut heard = PgListener::connect(&server.url()).await.unwrap();
    heard.listen("queue").await.unwrap();
    let key = LockKey::new("jobs/queue").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(1));
    let waits = opts.clone().wait(Wait::For(Duration::from_secs(10)));

    // The server hands the lock over: the waiter's lease counts from the
    // grant, not from the statement that waited for it.
    let lease = a.acquire(&key, &opts).await.unwrap();
    let waiter = queue_behind(&server, &b, &key, &waits).await;
    // Held most of the ttl while the waiter's one statement waits.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let first = lease.token();
    lease.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.token() > first);
    assert!(
        next.remaining() > Duration::from_millis(500),
        "the lease counts from the grant: {:?} left",
        next.remaining()
    );
    next.release().await.unwrap();
    nothing_before(&mut heard, &server, "queue", "a hand-off notifies nobody").await;

    // A waiter cancelled in the queue leaves it, and nothing holds the lock
    // after the holder's release.
    let lease = a.acquire(&key, &opts).await.unwrap();
    let cancelled = queue_behind(&server, &b, &key, &waits).await;
    cancelled.abort();
    eventually(
        Duration::from_secs(5),
        "the cancelled waiter gone",
        async || queued(&server, &key).await == 0,
    )
    .await;
    lease.release().await.unwrap();
    let free = b.acquire(&key, &opts.clone().wait(Wait::No)).await.unwrap();
    free.release().await.unwrap();

    // A wait that runs out leaves the queue too.
    let lease = a.acquire(&key, &opts).await.unwrap();
    let short = opts.clone().wait(Wait::For(Duration::from_millis(300)));
    match b.acquire(&key, &short).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected the wait to end, got {other:?}"),
    }
    assert_eq!(queued(&server, &key).await, 0, "nobody queued");
    lease.release().await.unwrap();
}
