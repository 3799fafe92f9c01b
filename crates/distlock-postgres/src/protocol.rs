//! The wire protocol: the two strategies and every statement they send, as
//! named SQL files in `sql/`. `{table}` is replaced, once at connect, by a
//! [`TableName`] validated as a plain identifier (and double-quoted); every
//! value goes through a `$n` placeholder.
//!
//! Every statement that decides ownership answers in its own reply: the CAS
//! `UPDATE … RETURNING fence` inside a `WITH`, the advisory lock and its
//! counter bump in one statement. A `version_cas` release sends `pg_notify`
//! in the same statement, only when it freed something and some waiter
//! marked the name (on its client's listening session, see `wake`), so a
//! wake-up costs no round trip; `advisory`'s waiters wait in the server's
//! lock queue, and its release notifies nobody.
//!
//! A fresh row's fence is seeded at the higher of the server clock in
//! microseconds and the namespace's floor + 1 (distlock-sql's `state`): a name
//! whose row was collected gets tokens above every earlier one.

use crate::error::BACKEND;
use crate::keys::{DEFAULT_ADVISORY_TABLE, TableName};
use distlock_core::{
    Capabilities, FencingGuarantee, LockError, Primitives, Support, TokenDurability, Wake,
};
use distlock_sql::state::{Addition, Idle};
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};
use std::str::FromStr;
use std::time::Duration;

/// How the lock is kept. All clients of one table must use the same strategy;
/// the table records its strategy (its comment) and `connect` refuses a
/// mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// The row persists; acquire is one CAS `UPDATE … RETURNING fence` on a
    /// free or expired row that raises the `fence` column. Two statements per
    /// uncontended cycle; expiry on the database clock.
    #[default]
    VersionCas,
    /// A session-level advisory lock on a connection of its own, keyed by a
    /// hash of namespace and name; the lock dies with the connection (the
    /// server ends a session idle for longer than the ttl), and the token comes
    /// from a counter bumped in the same statement once the lock is held.
    Advisory,
}

/// Why `advisory` offers no semaphore or read-write lock.
const ROWS_NOT_SESSIONS: &str = "an advisory lock lives in one session, so each permit or share would pin a \
     connection and a crashed reader's share could not expire by ttl; the semaphore and read-write lock are \
     row-based with expiry by the database clock: connect with strategy=version_cas for them";

/// The smallest ttl of `version_cas`: below it a lease would spend most of its
/// life in round trips.
const MIN_CAS_TTL: Duration = Duration::from_millis(10);
/// The smallest ttl of `advisory`: a keepalive every ttl/3 on a connection of
/// its own.
const MIN_ADVISORY_TTL: Duration = Duration::from_secs(1);

impl distlock_sql::config::SqlStrategy for Strategy {
    const NAMES: &'static [&'static str] = &Strategy::NAMES;

    fn default_table(self) -> &'static str {
        match self {
            Strategy::VersionCas => TableName::DEFAULT,
            Strategy::Advisory => DEFAULT_ADVISORY_TABLE,
        }
    }
}

impl Strategy {
    /// Every strategy's name, as `?strategy=` takes it.
    pub const NAMES: [&'static str; 2] = ["version_cas", "advisory"];

    /// The name used in URLs (`?strategy=`) and in the table comment.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::VersionCas => "version_cas",
            Strategy::Advisory => "advisory",
        }
    }

    /// The comment that marks a table as owned by this strategy.
    pub(crate) fn table_comment(self) -> String {
        format!("distlock:{}", self.as_str())
    }

    /// What a client of this strategy guarantees.
    pub fn capabilities(self) -> Capabilities {
        let cas = Capabilities::new()
            .fencing(FencingGuarantee::Strict)
            // A release notifies (LISTEN/NOTIFY); polling is only the fallback.
            .wake(Wake::Push)
            .token_durability(TokenDurability::Persisted)
            .min_ttl(MIN_CAS_TTL)
            .ttl_granularity(Duration::from_micros(1))
            .primitives(Primitives::ALL)
            .min_hold(Support::Offered);
        match self {
            Strategy::VersionCas => cas.state_collection(Support::Offered),
            // `idle_session_timeout` is in milliseconds.
            Strategy::Advisory => cas
                .state_collection(Support::Offered)
                .session_bound(true)
                .min_hold(Support::NotOffered(
                    "strategy=advisory holds a session lock that ends with its holder's connection; use strategy=version_cas for a minimum hold",
                ))
                .min_ttl(MIN_ADVISORY_TTL)
                .ttl_granularity(Duration::from_millis(1))
                .primitives(
                    Primitives::ALL
                        .semaphore(Support::NotOffered(ROWS_NOT_SESSIONS))
                        .rwlock(Support::NotOffered(ROWS_NOT_SESSIONS)),
                ),
        }
    }
}

impl FromStr for Strategy {
    type Err = LockError;

    fn from_str(s: &str) -> Result<Self, LockError> {
        match s {
            "version_cas" => Ok(Strategy::VersionCas),
            "advisory" => Ok(Strategy::Advisory),
            other => Err(LockError::config(
                BACKEND,
                format!("unknown strategy `{other}`; use version_cas or advisory"),
            )),
        }
    }
}

/// The round trip a keepalive and `ping` send.
pub(crate) const KEEPALIVE: &str = "SELECT 1";
/// This session's identity: (backend pid, backend_start in µs).
pub(crate) const SESSION_IDENTITY: &str = include_str!("sql/session_identity.sql");
/// Ends another session if that very session still exists (a reused pid does
/// not match); one row per backend signalled. Binds: pid, start µs.
pub(crate) const SESSION_TERMINATE: &str = include_str!("sql/session_terminate.sql");
/// Whether a session still exists. Binds: pid, start µs.
pub(crate) const SESSION_LISTED: &str = include_str!("sql/session_listed.sql");
/// Whether the table exists, and its comment. Binds: table name.
pub(crate) const TABLE_COMMENT: &str = include_str!("sql/table_comment.sql");
const CREATE_TABLE: &str = include_str!("sql/create_table.sql");
const MARK_TABLE: &str = include_str!("sql/mark_table.sql");

/// How the sweep of the advisory table finds idle counters: as distlock-sql's
/// own, and skipping every name whose key a session holds or waits for.
pub(crate) const COUNTER_IDLE: Idle = Idle {
    max: include_str!("sql/counter_idle_max.sql"),
    sweep: include_str!("sql/counter_sweep.sql"),
};

/// `version_cas`'s `used_at` column (see distlock-sql's `CasSql::idle`),
/// which tables of earlier releases lack.
pub(crate) const USED_AT: Addition = Addition {
    has: include_str!("sql/used_at_has_column.sql"),
    add: include_str!("sql/used_at_add_column.sql"),
};
/// The `used_at` column, as an error names it.
pub(crate) const USED_AT_COLUMN: &str =
    "`used_at` column (when a lock was last taken or renewed, which finds idle rows)";
/// Drops the index on `expires_at` that `version_cas` tables of earlier
/// releases have.
pub(crate) const DROP_EXPIRY_INDEX: &str = include_str!("sql/used_at_drop_old_index.sql");

/// advisory: gives back every session-level advisory lock of the session,
/// which on a holder's connection is at most the one it tried for.
pub(crate) const ADVISORY_GIVE_BACK: &str = "SELECT pg_advisory_unlock_all()";

/// Creates a missing counter row. Binds: namespace, name, key, holder, floor.
pub(crate) const COUNTER_INSERT: &str = include_str!("sql/counter_insert.sql");

/// The statements of one table, rendered once at connect (`version_cas`'s
/// are distlock-sql's, `sql/postgres/cas_*.sql` there).
#[derive(Debug)]
pub(crate) struct Statements {
    /// advisory: try the lock, or wait for it in the server's queue under a
    /// `lock_timeout`, then (held) raise the counter if the name's row
    /// records the key; returns (got, token, µs the statement ran before the
    /// grant). Binds: namespace, name, key, idle timeout ms (text), holder,
    /// `lock_timeout` ms (text; NULL to try once).
    pub advisory_acquire: SqlStr,
    /// Binds: idle timeout ms (text).
    pub advisory_keepalive: SqlStr,
    /// Unlocks and clears the idle timeout. Binds: key.
    pub advisory_release: SqlStr,
    /// advisory and `lock_in`: raises the counter of a name whose lock is
    /// held, if its row records the key; returns the token, or no row.
    /// Binds: namespace, name, key, holder.
    pub counter_bump: SqlStr,
    /// What [`counter_bump`](Self::counter_bump) falls back on: (no other
    /// name recorded for the key) records the key and raises the counter;
    /// returns (token, other namespace, other name), all NULL when the name
    /// has no row. Binds: namespace, name, key, holder.
    pub tx_bump: SqlStr,
    /// See [`COUNTER_INSERT`].
    pub counter_insert: SqlStr,
    /// The NOTIFY channel of this table: its name.
    pub channel: String,
}

impl Statements {
    pub fn new(table: &TableName) -> Self {
        let sql = |template: &str| for_table(template, table);
        Statements {
            advisory_acquire: sql(include_str!("sql/advisory_acquire.sql")),
            advisory_keepalive: sql(include_str!("sql/advisory_keepalive.sql")),
            advisory_release: sql(include_str!("sql/advisory_release.sql")),
            counter_bump: sql(include_str!("sql/counter_bump.sql")),
            tx_bump: sql(include_str!("sql/tx_bump.sql")),
            counter_insert: sql(COUNTER_INSERT),
            channel: table.as_str().to_owned(),
        }
    }

    /// The `CREATE TABLE IF NOT EXISTS` for `table`.
    pub fn create_table(table: &TableName) -> SqlStr {
        for_table(CREATE_TABLE, table)
    }

    /// The `COMMENT ON TABLE` that marks `table` as owned by `strategy`.
    pub fn mark_table(table: &TableName, strategy: Strategy) -> SqlStr {
        // The comment is one of our own constants ("distlock:version_cas", ...).
        let sql = MARK_TABLE
            .replace("{table}", table.as_str())
            .replace("{comment}", &strategy.table_comment());
        AssertSqlSafe(sql).into_sql_str()
    }
}

/// `template` with `{table}` replaced by the validated table name: the only text
/// ever spliced into SQL.
pub(crate) fn for_table(template: &str, table: &TableName) -> SqlStr {
    distlock_sql::table::kept_sql(template.trim_end().replace("{table}", table.as_str()))
}

/// What an operator (and the test suite) asks of the table beyond the lock
/// protocol.
pub(crate) mod inspect {
    /// advisory: rows whose key a session holds now (`pg_locks`), with the
    /// fence and the holder's pid. Binds: namespace, prefix, exact name only.
    pub const ADVISORY_HOLDERS: &str = include_str!("sql/advisory_holders.sql");
    /// The server's version number (150004 for 15.4).
    pub const VERSION_NUM: &str = "SELECT current_setting('server_version_num')::INT";
    /// `on` on a standby.
    pub const IN_RECOVERY: &str = "SELECT pg_is_in_recovery()";
    /// Whether commits wait for the WAL flush.
    pub const SYNCHRONOUS_COMMIT: &str = "SELECT current_setting('synchronous_commit')";
    /// `fsync` setting.
    pub const FSYNC: &str = "SELECT current_setting('fsync')";
    /// Transactions the server committed and rolled back in this database,
    /// as its statistics have them.
    pub const TRANSACTIONS: &str = "SELECT (xact_commit + xact_rollback)::BIGINT FROM pg_stat_database WHERE datname = current_database()";
}
