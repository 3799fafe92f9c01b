//! `FencedRow`: the single-row fenced `UPDATE` against a real MariaDB.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use distlock_core::{FencingToken, LockError};
use distlock_sql::FencedRow;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection};
use support::{connect, exec, value};

const T: fn(u64) -> FencingToken = FencingToken::new;

/// `accounts_<suffix>` with rows 1 and 2 (balance 0, note '', fence 0).
async fn accounts(suffix: &str) -> (FencedRow, MySqlConnection, String) {
    let table = format!("accounts_{suffix}");
    exec(&format!(
        "CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL,
             note VARCHAR(64) NOT NULL, fence BIGINT UNSIGNED NOT NULL DEFAULT 0);
         INSERT INTO `{table}` (id, balance, note) VALUES (1, 0, ''), (2, 0, '');"
    ))
    .await;
    let row = FencedRow::new(&table, "id", "fence").unwrap();
    (row, connect().await, table)
}

/// Sets row `id`'s balance and note with `token`.
async fn set(
    row: &FencedRow,
    conn: &mut MySqlConnection,
    id: i64,
    token: u64,
    (balance, note): (i64, &str),
) -> Result<(), LockError> {
    let sql = row.update_sql("balance = ?, note = ?");
    let query = sqlx::query(AssertSqlSafe(sql)).bind(balance).bind(note);
    row.execute(conn, query, id, T(token)).await
}

async fn state(table: &str, id: i64) -> (i64, String, u64) {
    let mut conn = connect().await;
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT balance, note, fence FROM `{table}` WHERE id = ?"
    )))
    .bind(id)
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_stale_token_is_refused_and_changes_nothing() {
    let (row, mut conn, table) = accounts("stale").await;
    set(&row, &mut conn, 1, 5, (10, "five")).await.unwrap();
    match set(&row, &mut conn, 1, 4, (99, "stale")).await {
        Err(LockError::StaleToken {
            resource,
            token,
            highest,
        }) => {
            assert_eq!((token, highest), (T(4), T(5)));
            assert!(
                resource.contains("accounts_stale") && resource.contains('1'),
                "{resource}"
            );
        }
        other => panic!("expected StaleToken, got {other:?}"),
    }
    assert_eq!(state(&table, 1).await, (10, "five".to_owned(), 5));
    // Higher tokens write, and the other row is untouched throughout.
    set(&row, &mut conn, 1, 8, (20, "eight")).await.unwrap();
    assert_eq!(state(&table, 1).await, (20, "eight".to_owned(), 8));
    assert_eq!(state(&table, 2).await, (0, String::new(), 0));

    // Inside a transaction, a refusal leaves the caller's earlier statements
    // to roll back with it.
    let mut tx = conn.begin().await.unwrap();
    let sql = format!("UPDATE `{table}` SET note = 'tx' WHERE id = 2");
    sqlx::query(AssertSqlSafe(sql))
        .execute(&mut *tx)
        .await
        .unwrap();
    let err = set(&row, &mut tx, 1, 7, (0, "late")).await.unwrap_err();
    assert!(matches!(err, LockError::StaleToken { .. }), "{err:?}");
    drop(tx);
    assert_eq!(state(&table, 2).await, (0, String::new(), 0));
}

/// sqlx connects with CLIENT_FOUND_ROWS: the server counts matched rows. A
/// write with the current token and the current values changes nothing, and
/// still counts as written; without the flag it would count 0 and be taken for
/// a refusal.
#[tokio::test]
async fn an_equal_token_with_identical_values_is_admitted() {
    let (row, mut conn, table) = accounts("found_rows").await;
    set(&row, &mut conn, 1, 5, (10, "same")).await.unwrap();

    // The premise: an UPDATE that changes nothing reports its matched row.
    let unchanged = sqlx::query(AssertSqlSafe(format!(
        "UPDATE `{table}` SET balance = 10, note = 'same', fence = 5 WHERE id = 1"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        unchanged.rows_affected(),
        1,
        "sqlx no longer sets CLIENT_FOUND_ROWS; FencedRow::execute must change"
    );

    set(&row, &mut conn, 1, 5, (10, "same")).await.unwrap();
    assert_eq!(state(&table, 1).await, (10, "same".to_owned(), 5));
    // Only the fence, with no assignments of the caller's: equal still passes.
    let query = sqlx::query(AssertSqlSafe(row.update_sql("")));
    row.execute(&mut conn, query, 1_i64, T(5)).await.unwrap();
}

#[tokio::test]
async fn a_missing_row_is_named() {
    let (row, mut conn, table) = accounts("missing").await;
    let err = set(&row, &mut conn, 42, 1, (1, "x")).await.unwrap_err();
    match &err {
        LockError::InvalidWrite { reason } => {
            assert!(reason.contains(&format!("`{table}`")), "{reason}");
            assert!(reason.contains("`id` = 42"), "{reason}");
            assert!(reason.contains("insert it"), "{reason}");
        }
        other => panic!("expected InvalidWrite, got {other:?}"),
    }
    let rows: i64 = value(&format!("SELECT COUNT(*) FROM `{table}`"))
        .await
        .unwrap();
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn text_keys_and_foreign_queries() {
    exec(
        "CREATE TABLE jobs (name VARCHAR(64) PRIMARY KEY, state VARCHAR(16) NOT NULL,
             `order` BIGINT UNSIGNED NOT NULL DEFAULT 0);
         INSERT INTO jobs (name, state) VALUES ('nightly', 'new');",
    )
    .await;
    // A reserved word as the fence column works: identifiers are quoted.
    let row = FencedRow::new("jobs", "name", "order").unwrap();
    let mut conn = connect().await;
    let query = sqlx::query(AssertSqlSafe(row.update_sql("state = ?"))).bind("done");
    row.execute(&mut conn, query, "nightly", T(3))
        .await
        .unwrap();
    let query = sqlx::query(AssertSqlSafe(row.update_sql("state = ?"))).bind("old");
    let err = row
        .execute(&mut conn, query, "nightly", T(2))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::StaleToken { .. }), "{err:?}");
    let state: String = value("SELECT state FROM jobs WHERE name = 'nightly'")
        .await
        .unwrap();
    assert_eq!(state, "done");

    // A query that is not this row's fenced update is refused before I/O.
    let other = FencedRow::new("jobs", "name", "fence").unwrap();
    for sql in [
        other.update_sql("state = ?"),
        "UPDATE jobs SET state = ?".to_owned(),
    ] {
        let query = sqlx::query(AssertSqlSafe(sql)).bind("hijack");
        let err = row
            .execute(&mut conn, query, "nightly", T(9))
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::InvalidWrite { .. }), "{err:?}");
    }
    let state: String = value("SELECT state FROM jobs WHERE name = 'nightly'")
        .await
        .unwrap();
    assert_eq!(state, "done");
}
