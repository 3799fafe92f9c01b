//! `SqlFence::admit` and `highest` against a real MariaDB: what is admitted,
//! what is refused, what commits and what rolls back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockError};
use distlock_sql::{SqlFence, is_contention};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection};
use std::time::Duration;
use support::{connect, eventually, exec, sessions_running, value};

const T: fn(u64) -> FencingToken = FencingToken::new;

/// A fence on its own table, created, and a data table `{name}_data` with
/// one row (id 1, v '').
async fn setup(name: &str) -> (SqlFence, MySqlConnection) {
    let fence = SqlFence::with_table(name).unwrap();
    let mut conn = connect().await;
    fence.create_table(&mut conn).await.unwrap();
    fence
        .create_table(&mut conn)
        .await
        .expect("creating twice is fine");
    exec(&format!(
        "CREATE TABLE `{name}_data` (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL);
         INSERT INTO `{name}_data` VALUES (1, '');"
    ))
    .await;
    (fence, conn)
}

/// Admits `token` for `resource` and sets the data row to `v` in one
/// transaction, committed if admitted.
async fn write(
    fence: &SqlFence,
    conn: &mut MySqlConnection,
    resource: &str,
    token: FencingToken,
    v: &str,
) -> Result<(), LockError> {
    let mut tx = conn.begin().await.unwrap();
    fence.admit(&mut tx, resource, token).await?;
    let sql = format!("UPDATE `{}_data` SET v = ? WHERE id = 1", fence.table());
    sqlx::query(AssertSqlSafe(sql))
        .bind(v)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

async fn data(fence: &SqlFence) -> String {
    value(&format!(
        "SELECT v FROM `{}_data` WHERE id = 1",
        fence.table()
    ))
    .await
    .unwrap()
}

fn assert_stale(result: Result<(), LockError>, token: u64, highest: u64) {
    match result {
        Err(LockError::StaleToken {
            token: t,
            highest: h,
            ..
        }) => assert_eq!((t, h), (T(token), T(highest))),
        other => panic!("expected StaleToken({token} < {highest}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_stale_token_is_refused_and_its_transaction_changes_nothing() {
    let (fence, mut conn) = setup("stale_refused").await;
    write(&fence, &mut conn, "r", T(5), "five").await.unwrap();

    // The caller's statement before admit, in the same transaction, is rolled
    // back with it when the refused transaction is dropped.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("UPDATE stale_refused_data SET v = 'stale' WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_stale(fence.admit(&mut tx, "r", T(4)).await, 4, 5);
    drop(tx);
    assert_eq!(data(&fence).await, "five");
    assert_eq!(fence.highest(&mut conn, "r").await.unwrap(), Some(T(5)));

    // An admitted token whose transaction rolls back records nothing either.
    let mut tx = conn.begin().await.unwrap();
    fence.admit(&mut tx, "r", T(9)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(fence.highest(&mut conn, "r").await.unwrap(), Some(T(5)));
    assert_stale(write(&fence, &mut conn, "r", T(0), "zero").await, 0, 5);
    assert_eq!(data(&fence).await, "five");
}

#[tokio::test]
async fn equal_and_higher_tokens_are_admitted_and_commit() {
    let (fence, mut conn) = setup("equal_higher").await;
    assert_eq!(fence.highest(&mut conn, "r").await.unwrap(), None);
    write(&fence, &mut conn, "r", T(5), "a").await.unwrap();
    write(&fence, &mut conn, "r", T(5), "b").await.unwrap();
    assert_eq!(data(&fence).await, "b");
    write(&fence, &mut conn, "r", T(u64::MAX - 1), "c")
        .await
        .unwrap();
    assert_eq!(data(&fence).await, "c");
    assert_eq!(
        fence.highest(&mut conn, "r").await.unwrap(),
        Some(T(u64::MAX - 1))
    );
    assert_stale(
        write(&fence, &mut conn, "r", T(u64::MAX - 2), "d").await,
        u64::MAX - 2,
        u64::MAX - 1,
    );
    write(&fence, &mut conn, "r", T(u64::MAX), "e")
        .await
        .unwrap();
    assert_eq!(data(&fence).await, "e");
    // Read from another session: committed.
    let stored: u64 = value("SELECT highest FROM equal_higher WHERE resource = 'r'")
        .await
        .unwrap();
    assert_eq!(stored, u64::MAX);
}

#[tokio::test]
async fn resources_are_independent() {
    let (fence, mut conn) = setup("independent").await;
    write(&fence, &mut conn, "a", T(100), "a100").await.unwrap();
    write(&fence, &mut conn, "b", T(1), "b1").await.unwrap();
    // Names differing only in case or trailing space are other resources.
    write(&fence, &mut conn, "A", T(2), "A2").await.unwrap();
    write(&fence, &mut conn, "a ", T(3), "a 3").await.unwrap();
    assert_stale(write(&fence, &mut conn, "b", T(0), "b0").await, 0, 1);
    assert_eq!(fence.highest(&mut conn, "a").await.unwrap(), Some(T(100)));
    assert_eq!(fence.highest(&mut conn, "A").await.unwrap(), Some(T(2)));
    assert_eq!(fence.highest(&mut conn, "a ").await.unwrap(), Some(T(3)));
    // A full 512-byte name (multi-byte UTF-8) is stored and found.
    let long = "é".repeat(256);
    write(&fence, &mut conn, &long, T(7), "long").await.unwrap();
    assert_eq!(fence.highest(&mut conn, &long).await.unwrap(), Some(T(7)));
    let rows: i64 = value("SELECT COUNT(*) FROM independent").await.unwrap();
    assert_eq!(rows, 5);
}

#[tokio::test]
async fn a_holder_of_the_row_makes_the_next_writer_wait_for_its_commit() {
    let (fence, mut first) = setup("waits").await;
    let mut second = connect().await;
    let mut tx = first.begin().await.unwrap();
    fence.admit(&mut tx, "r", T(10)).await.unwrap();

    let other = fence.clone();
    let waiter = tokio::spawn(async move {
        let mut tx2 = second.begin().await.unwrap();
        other.admit(&mut tx2, "r", T(5)).await
    });
    // The second admit is queued on the first one's row lock (a first writer
    // of the resource: the row is not even committed yet).
    eventually(
        Duration::from_secs(10),
        "the second admit waits",
        async || sessions_running("INSERT INTO `waits`").await == 1,
    )
    .await;
    assert!(!waiter.is_finished());
    tx.commit().await.unwrap();
    assert_stale(waiter.await.unwrap(), 5, 10);
}

#[tokio::test]
async fn a_lock_wait_timeout_is_a_transient_contention_error() {
    let (fence, mut first) = setup("lock_wait").await;
    let mut second = connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut second)
        .await
        .unwrap();
    let mut tx = first.begin().await.unwrap();
    fence.admit(&mut tx, "r", T(3)).await.unwrap();

    let mut tx2 = second.begin().await.unwrap();
    let err = fence.admit(&mut tx2, "r", T(4)).await.unwrap_err();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(err.is_transient() && is_contention(&err), "{err}");
    drop(tx2);
    tx.commit().await.unwrap();
    // Retried as a whole, it goes through.
    let mut tx2 = second.begin().await.unwrap();
    fence.admit(&mut tx2, "r", T(4)).await.unwrap();
    tx2.commit().await.unwrap();
    assert_eq!(fence.highest(&mut first, "r").await.unwrap(), Some(T(4)));
}

#[tokio::test]
async fn bad_input_is_refused_before_any_io() {
    assert!(matches!(
        SqlFence::with_table("fences; DROP TABLE x"),
        Err(LockError::Config { .. })
    ));
    assert!(matches!(
        SqlFence::with_table("9fences"),
        Err(LockError::Config { .. })
    ));
    let (fence, mut conn) = setup("bad_input").await;

    // Autocommit: refused, and no row was written.
    let err = fence.admit(&mut conn, "r", T(1)).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidWrite { .. }), "{err:?}");
    assert!(err.to_string().contains("transaction"), "{err}");
    assert_eq!(fence.highest(&mut conn, "r").await.unwrap(), None);
    // Inside a transaction, create_table would commit it: refused.
    let mut tx = conn.begin().await.unwrap();
    let err = fence.create_table(&mut tx).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidWrite { .. }), "{err:?}");
    drop(tx);

    // A connection whose session was killed fails any statement, so only a
    // check made before I/O can answer InvalidKey.
    let mut tx = conn.begin().await.unwrap();
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    support::root_value(&format!("KILL {id};")).await;
    for resource in [String::new(), "x".repeat(513), "a\0b".to_owned()] {
        let err = fence.admit(&mut tx, &resource, T(1)).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
        let err = fence.highest(&mut tx, &resource).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    }
    let err = fence.admit(&mut tx, "r", T(1)).await.unwrap_err();
    assert!(
        err.is_transient(),
        "the killed session fails real I/O: {err:?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_no_message_shows_the_password() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("mysql://app:s3cr3t-pw@127.0.0.1:{port}/app");
    match distlock_sql::connect(&url).await {
        Err(err @ LockError::Unavailable { .. }) => {
            let LockError::Unavailable { endpoint, .. } = &err else {
                unreachable!()
            };
            assert_eq!(endpoint, &format!("mysql://127.0.0.1:{port}/app"));
            assert!(err.is_transient());
            let (shown, debug) = (err.to_string(), format!("{err:?}"));
            assert!(
                !shown.contains("s3cr3t") && !debug.contains("s3cr3t"),
                "{debug}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // A wrong password on a real server: a Config error, without the password.
    let server = support::server().await;
    let url = server
        .url()
        .replace(&format!(":{}@", server.password()), ":wrong-pw-123@");
    assert_ne!(url, server.url());
    let err = distlock_sql::connect(&url).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(!format!("{err:?}{err}").contains("wrong-pw-123"), "{err:?}");
}
