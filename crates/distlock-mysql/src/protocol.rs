//! Every statement the adapter sends, as named templates. `{table}` is replaced,
//! once at connect, by a [`crate::TableName`] that was validated as a plain
//! identifier; every value goes through a `?` placeholder.
//!
//! The statements that decide ownership prove it through the OK packet's
//! insert id, set by `LAST_INSERT_ID(expr)`: sqlx sets `CLIENT_FOUND_ROWS`, so
//! affected-row counts are not what MySQL documents for upserts, while the insert
//! id is exactly the last `LAST_INSERT_ID(expr)` the statement evaluated (0 if none).

use crate::TableName;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The one lock table. `name` is the (possibly hashed) lock name, `owner` a
/// random value per acquisition, `fence` the version column / fencing counter,
/// `expires_at` the server-clock expiry. The comment records the strategy that
/// owns the table, so two strategies never share one by accident.
pub(crate) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS `{table}` (
    name VARBINARY(255) NOT NULL,
    owner VARBINARY(64) NULL DEFAULT NULL,
    fence BIGINT UNSIGNED NOT NULL DEFAULT 0,
    expires_at TIMESTAMP(6) NULL DEFAULT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB COMMENT='{comment}'";

/// The table's comment, to check which strategy owns it.
pub(crate) const TABLE_COMMENT: &str = "SELECT TABLE_COMMENT FROM information_schema.TABLES \
     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?";

/// This connection's server thread id, the argument `KILL` needs.
pub(crate) const CONNECTION_ID: &str = "SELECT CONNECTION_ID()";

/// A fresh row's fence, from the server clock in microseconds: if an operator
/// deletes a row, its next tokens still exceed every earlier one (as long as the
/// server clock does not step back and the key saw fewer than one acquisition per
/// microsecond on average).
macro_rules! clock_seed {
    () => {
        "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)"
    };
}

/// The insert id that marks "held by someone else"; the low bits carry the
/// holder's remaining microseconds. Fences never get near 2^63.
pub(crate) const HELD_FLAG: u64 = 1 << 63;

/// version_cas: creates the persistent row of a name, once.
pub(crate) const CAS_INSERT_ROW: &str = concat!(
    "INSERT IGNORE INTO `{table}` (name, fence) VALUES (?, ",
    clock_seed!(),
    ")"
);

/// version_cas acquire: one CAS on a free or expired row. Insert id: `fence + 1`
/// (the token) if won; `HELD_FLAG | remaining µs` if held; 0 if the row is absent.
pub(crate) const CAS_ACQUIRE: &str = "UPDATE `{table}`
   SET owner = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND, fence = LAST_INSERT_ID(fence + 1)
 WHERE name = ?
   AND (owner IS NULL OR expires_at IS NULL OR expires_at <= NOW(6)
        OR LAST_INSERT_ID((1 << 63) | TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at)) = 0)";

/// version_cas renew: compare owner and fence. A plain UPDATE: with
/// `CLIENT_FOUND_ROWS` its count is the rows its WHERE matched, which is exactly
/// "still ours" (an upsert's count would not be).
pub(crate) const CAS_RENEW: &str = "UPDATE `{table}`
   SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ? AND owner = ? AND fence = ?";

/// version_cas release: clears the owner and keeps the row, so the fence never
/// resets. Matched rows: 1 if it was ours.
pub(crate) const CAS_RELEASE: &str = "UPDATE `{table}`
   SET owner = NULL, expires_at = NULL
 WHERE name = ? AND owner = ? AND fence = ?";

/// version_cas: frees a row an abandoned acquire may have won (its reply never
/// came, so only the owner is known).
pub(crate) const CAS_ABANDON: &str = "UPDATE `{table}`
   SET owner = NULL, expires_at = NULL
 WHERE name = ? AND owner = ?";

/// unique_insert acquire: the primary key rejects a second holder (error 1062).
pub(crate) const UNIQUE_INSERT: &str = "INSERT INTO `{table}` (name, owner, fence, expires_at)
VALUES (?, ?, 0, NOW(6) + INTERVAL ? MICROSECOND)";

/// unique_insert takeover of an expired row, in one guarded statement. Insert id:
/// `HELD_FLAG` exactly if taken over; `HELD_FLAG | remaining µs` if still held; 0 if
/// the row is gone (released meanwhile: insert again).
pub(crate) const UNIQUE_TAKEOVER: &str = "UPDATE `{table}`
   SET owner = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ?
   AND LAST_INSERT_ID((1 << 63) | GREATEST(IFNULL(TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at), 0), 0))
       = (1 << 63)";

/// unique_insert renew: compare owner. Matched rows: 1 if still ours.
pub(crate) const UNIQUE_RENEW: &str = "UPDATE `{table}`
   SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ? AND owner = ?";

/// unique_insert release: the row exists only while held. A DELETE reports the
/// rows it deleted, whatever `CLIENT_FOUND_ROWS` says.
pub(crate) const UNIQUE_RELEASE: &str = "DELETE FROM `{table}` WHERE name = ? AND owner = ?";

/// unique_insert and for_update: raises the never-deleted counter row of a name
/// and returns the new value as the insert id (never 0).
pub(crate) const BUMP_COUNTER: &str = concat!(
    "INSERT INTO `{table}` (name, fence) VALUES (?, LAST_INSERT_ID(",
    clock_seed!(),
    ")) ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
);

/// for_update, once per holder connection: no gap locks (a missing row locks
/// nothing), and every statement runs in a transaction until COMMIT.
pub(crate) const HOLDER_ISOLATION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
/// See [`HOLDER_ISOLATION`].
pub(crate) const HOLDER_NO_AUTOCOMMIT: &str = "SET SESSION autocommit = 0";

/// for_update: how long the server waits for the row lock, and how long it keeps
/// an idle holder's session (and so its lock) without a keepalive. Whole seconds.
pub(crate) const HOLDER_TIMEOUTS: &str =
    "SET SESSION innodb_lock_wait_timeout = ?, SESSION wait_timeout = ?";

/// for_update: takes the row lock, waiting server-side.
pub(crate) const FOR_UPDATE: &str = "SELECT fence FROM `{table}` WHERE name = ? FOR UPDATE";
/// for_update with `Wait::No`.
pub(crate) const FOR_UPDATE_NOWAIT: &str =
    "SELECT fence FROM `{table}` WHERE name = ? FOR UPDATE NOWAIT";
/// for_update: creates the row inside the locking transaction (holding it).
pub(crate) const FOR_UPDATE_INSERT_ROW: &str =
    "INSERT IGNORE INTO `{table}` (name, fence) VALUES (?, 0)";
/// for_update keepalive: proves the session (and its transaction) is alive and
/// resets the server's idle timer.
pub(crate) const KEEPALIVE: &str = "SELECT 1";
/// for_update release.
pub(crate) const COMMIT: &str = "COMMIT";
/// for_update: ends a failed attempt's transaction.
pub(crate) const ROLLBACK: &str = "ROLLBACK";
/// for_update: ends a waiter that was given up on, and any lock it got meanwhile.
pub(crate) const KILL_CONNECTION: &str = "KILL CONNECTION ?";

/// The statements of one table, built once.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub cas_insert_row: SqlStr,
    pub cas_acquire: SqlStr,
    pub cas_renew: SqlStr,
    pub cas_release: SqlStr,
    pub cas_abandon: SqlStr,
    pub unique_insert: SqlStr,
    pub unique_takeover: SqlStr,
    pub unique_renew: SqlStr,
    pub unique_release: SqlStr,
    pub bump_counter: SqlStr,
    pub for_update: SqlStr,
    pub for_update_nowait: SqlStr,
    pub for_update_insert_row: SqlStr,
}

impl Statements {
    pub fn new(table: &TableName) -> Self {
        let build = |template: &str| {
            AssertSqlSafe(template.replace("{table}", table.as_str())).into_sql_str()
        };
        Statements {
            cas_insert_row: build(CAS_INSERT_ROW),
            cas_acquire: build(CAS_ACQUIRE),
            cas_renew: build(CAS_RENEW),
            cas_release: build(CAS_RELEASE),
            cas_abandon: build(CAS_ABANDON),
            unique_insert: build(UNIQUE_INSERT),
            unique_takeover: build(UNIQUE_TAKEOVER),
            unique_renew: build(UNIQUE_RENEW),
            unique_release: build(UNIQUE_RELEASE),
            bump_counter: build(BUMP_COUNTER),
            for_update: build(FOR_UPDATE),
            for_update_nowait: build(FOR_UPDATE_NOWAIT),
            for_update_insert_row: build(FOR_UPDATE_INSERT_ROW),
        }
    }

    /// The `CREATE TABLE` for `table`, marked as owned by `strategy`.
    pub fn create_table(table: &TableName, comment: &str) -> SqlStr {
        // The comment is one of our own constants ("distlock:version_cas", ...).
        let sql = CREATE_TABLE
            .replace("{table}", table.as_str())
            .replace("{comment}", comment);
        AssertSqlSafe(sql).into_sql_str()
    }
}
