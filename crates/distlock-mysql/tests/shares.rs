//! Semaphores and read-write locks: the share tables hold exactly the
//! documented rows, a foreign writer intent holds readers off until it
//! expires, row-lock contention is waited out, and missing tables give a
//! clear error.
// Test code: a failed expectation should panic with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{AcquireOptions, Held, LockError, LockKey, SingleLease, Wait};
use distlock_mysql::{MySqlConfig, Strategy};
use sqlx::{Connection, MySqlConnection};
use std::time::{Duration, Instant};
use support::{client, questions, root_value, server};

/// A permit is one row (slot, owner, token, server-clock expiry) under the
/// head row that keeps the limit and the last token; release deletes the
/// permit row and keeps the head.
#[tokio::test(flavor = "multi_thread")]
async fn a_permit_is_one_row_under_a_head_that_keeps_limit_and_counter() {
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "locks").await;
    let semaphore = lock.semaphore().expect("semaphores are offered");
    let key = LockKey::new("workers").unwrap();
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let first = semaphore.acquire(&key, 4, &opts).await.unwrap();
    let second = semaphore.acquire(&key, 4, &opts).await.unwrap();
    assert_eq!((first.slot(), second.slot()), (0, 1));
    let rows = |sql: &'static str| root_value(&server, sql);
    let head = rows(
        "SELECT CONCAT(permits, ' ', fence) FROM distlock.locks_sem \
         WHERE name = 'workers' AND slot = 4294967295;",
    )
    .await;
    assert_eq!(head, format!("4 {}", second.token()), "head row");
    let permit = rows(
        "SELECT CONCAT(fence, ' ', LENGTH(owner), ' ', \
         TIMESTAMPDIFF(SECOND, NOW(6), expires_at) BETWEEN 28 AND 30) \
         FROM distlock.locks_sem WHERE name = 'workers' AND slot = 1;",
    )
    .await;
    assert_eq!(permit, format!("{} 32 1", second.token()), "permit row");
    first.release().await.unwrap();
    second.release().await.unwrap();
    let left =
        rows("SELECT GROUP_CONCAT(slot) FROM distlock.locks_sem WHERE name = 'workers';").await;
    assert_eq!(left, "4294967295", "only the head row stays");
}

/// Another writer's intent, left by a writer that crashed while waiting, keeps
/// new readers out (and `try_write` too) only until it expires on the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_writers_intent_holds_readers_off_until_it_expires() {
    let server = server().await;
    let lock = client(&server, Strategy::UniqueInsert, "locks").await;
    let rwlock = lock.rwlock().expect("read-write locks are offered");
    let key = LockKey::new("catalog").unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(10)));
    // The table exists once the client connected; the intent is a writer's
    // that will never poll again.
    server
        .exec_root(
            "INSERT INTO distlock.locks_rw (name, slot, owner, fence, expires_at) \
             VALUES ('catalog', 4294967294, 'crashed-writer', 1, NOW(6) + INTERVAL 1500000 MICROSECOND);",
        )
        .await
        .unwrap();
    let written_at = Instant::now();
    assert!(
        rwlock.try_read(&key, &opts).await.unwrap().is_none(),
        "a reader overtook a writer's intent"
    );
    assert!(
        rwlock.try_write(&key, &opts).await.unwrap().is_none(),
        "a writer overtook another writer's intent"
    );
    let reader = rwlock.read(&key, &opts).await.unwrap();
    let waited = written_at.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(4),
        "the reader got in after {waited:?}, the intent expired after 1.5 s"
    );
    reader.release().await.unwrap();
    let left = root_value(
        &server,
        "SELECT COUNT(*) FROM distlock.locks_rw WHERE name = 'catalog' AND slot < 4294967295;",
    )
    .await;
    assert_eq!(left, "0", "the expired intent was tidied away by the grant");
}

/// With `create_table=false` and no share tables, the lock works and a
/// semaphore names the missing table and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn missing_share_tables_give_a_config_error_naming_the_fix() {
    let server = server().await;
    drop(client(&server, Strategy::VersionCas, "made").await);
    server
        .exec_root("DROP TABLE distlock.made_sem;")
        .await
        .unwrap();
    let lock = MySqlConfig::from_url(&server.url())
        .unwrap()
        .table("made")
        .create_table(false)
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("k").unwrap();
    let lease = lock.acquire(&key, &AcquireOptions::new()).await.unwrap();
    lease.release().await.unwrap();
    let refused = lock
        .semaphore()
        .unwrap()
        .acquire(&key, 2, &AcquireOptions::new())
        .await;
    match refused {
        Err(e @ LockError::Config { .. }) => {
            assert!(e.to_string().contains("create_table"), "{e}")
        }
        other => panic!("a missing semaphore table gave {other:?}"),
    }
}

/// Another transaction holding a semaphore's head row (then a permit row) for
/// longer than the adapter's 1 s lock wait: `Wait::No` answers `Busy`, a
/// waiting acquire gets its permit once the row is free, and a release waits
/// the permit row out; none of it surfaces 1205 to the caller.
#[tokio::test(flavor = "multi_thread")]
async fn row_lock_contention_on_share_rows_is_waited_out() {
    const HOLD: Duration = Duration::from_millis(2500);
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "locks").await;
    let semaphore = lock.semaphore().expect("semaphores are offered");
    let key = LockKey::new("blocked").unwrap();
    let opts = AcquireOptions::new().wait(Wait::For(Duration::from_secs(30)));
    let first = semaphore.acquire(&key, 2, &opts).await.unwrap();
    let block = async |slot: u32| {
        let mut conn = MySqlConnection::connect(&server.url()).await.unwrap();
        sqlx::raw_sql("START TRANSACTION")
            .execute(&mut conn)
            .await
            .unwrap();
        let sql = format!(
            "SELECT fence FROM locks_sem WHERE name = 'blocked' AND slot = {slot} FOR UPDATE"
        );
        let found = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        assert!(found.is_some(), "the row to block exists");
        conn
    };
    let roll_back_after_hold = |mut conn: MySqlConnection| {
        tokio::spawn(async move {
            tokio::time::sleep(HOLD).await;
            sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
        })
    };
    let head = roll_back_after_hold(block(4294967295).await);
    let started = Instant::now();
    let busy = semaphore.try_acquire(&key, 2, &opts).await;
    assert!(
        matches!(busy, Ok(None)),
        "Wait::No on a blocked head gave {busy:?}"
    );
    let second = semaphore
        .acquire(&key, 2, &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire through a blocked head: {e}"));
    assert!(
        started.elapsed() >= HOLD - Duration::from_millis(50),
        "got a permit after {:?}, before the head was free",
        started.elapsed()
    );
    assert!(second.token() > first.token());
    head.await.unwrap();
    let permit = roll_back_after_hold(block(first.slot()).await);
    let started = Instant::now();
    first
        .release()
        .await
        .unwrap_or_else(|e| panic!("release through a blocked permit row: {e}"));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the release never waited"
    );
    permit.await.unwrap();
    second.release().await.unwrap();
}

/// Statements per uncontended permit cycle and per refused `try_acquire`,
/// counted by the server: BEGIN, head raise, locked read, permit insert,
/// COMMIT, and the release's DELETE; a full semaphore's try rolls back after
/// the read.
#[tokio::test(flavor = "multi_thread")]
async fn a_permit_cycle_costs_six_statements_and_a_refused_try_four() {
    const CYCLES: u64 = 20;
    let server = server().await;
    let lock = client(&server, Strategy::VersionCas, "locks").await;
    let semaphore = lock.semaphore().expect("semaphores are offered");
    let key = LockKey::new("counted").unwrap();
    let opts = AcquireOptions::new().renewal(distlock_core::Renewal::Manual);
    let cycle = async || {
        let permit = semaphore.acquire(&key, 1, &opts).await.unwrap();
        permit.release().await.unwrap();
    };
    cycle().await;
    let mut probe = MySqlConnection::connect(&server.url()).await.unwrap();
    let before = questions(&mut probe).await;
    for _ in 0..CYCLES {
        cycle().await;
    }
    let after = questions(&mut probe).await;
    // The second SHOW counts itself.
    assert_eq!(
        (after - before - 1) as f64 / CYCLES as f64,
        6.0,
        "per cycle"
    );
    let held = semaphore.acquire(&key, 1, &opts).await.unwrap();
    let before = questions(&mut probe).await;
    for _ in 0..CYCLES {
        assert!(
            semaphore
                .try_acquire(&key, 1, &opts)
                .await
                .unwrap()
                .is_none()
        );
    }
    let after = questions(&mut probe).await;
    assert_eq!(
        (after - before - 1) as f64 / CYCLES as f64,
        4.0,
        "per refused try"
    );
    held.release().await.unwrap();
}
