//! The wire protocol: the three strategies and every statement they send, as
//! named constants over the SQL files in `sql/`. `{table}` is replaced, once at
//! connect, by a [`TableName`] that was validated as a plain identifier; every
//! value goes through a `?` placeholder.
//!
//! The statements that decide ownership prove it through the OK packet's
//! insert id, set by `LAST_INSERT_ID(expr)`: sqlx sets `CLIENT_FOUND_ROWS`, so
//! affected-row counts are not what MySQL documents for upserts, while the insert
//! id is exactly the last `LAST_INSERT_ID(expr)` the statement evaluated (0 if none).
//!
//! A fresh row's fence is seeded from the server clock in microseconds
//! (`CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)`): if an operator deletes
//! a row, its next tokens still exceed every earlier one (as long as the server
//! clock does not step back and the key saw fewer than one acquisition per
//! microsecond on average).

use crate::error::BACKEND;
use crate::keys::{TableName, hex_literal};
use distlock_core::{
    Capabilities, FencingGuarantee, LockError, Primitives, Support, TokenDurability, Wake,
};
use distlock_sql::state::Idle;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};
use std::str::FromStr;
use std::time::Duration;

/// How the lock is kept in the table. All clients of one table must use the same
/// strategy; the table records its strategy and `connect` refuses a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// The row persists; acquire is one CAS `UPDATE` on a free or expired row that
    /// raises the `fence` column and returns it in the same round trip. Two
    /// statements per uncontended cycle.
    #[default]
    VersionCas,
    /// The row exists only while held: `INSERT` acquires, the primary key rejects
    /// a second holder, an expired row is taken over by one guarded `UPDATE`, and
    /// `DELETE … WHERE owner` releases. Tokens come from a counter row,
    /// collected once the name has been idle for `state_ttl`.
    UniqueInsert,
    /// A dedicated connection holds an open transaction with an exclusive lock on
    /// the row (an `UPDATE` that tags it with the session id): waiting is
    /// server-side and the lock dies with the connection.
    ForUpdate,
}

/// The smallest ttl of the polling strategies: below it a lease would spend most
/// of its life in round trips.
const MIN_POLLING_TTL: Duration = Duration::from_millis(10);

impl distlock_sql::config::SqlStrategy for Strategy {
    const NAMES: &'static [&'static str] = &Strategy::NAMES;
}

impl Strategy {
    /// Every strategy's name, as `?strategy=` takes it.
    pub const NAMES: [&'static str; 3] = ["version_cas", "unique_insert", "for_update"];

    /// The name used in URLs (`?strategy=`) and in the table comment.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::VersionCas => "version_cas",
            Strategy::UniqueInsert => "unique_insert",
            Strategy::ForUpdate => "for_update",
        }
    }

    /// The comment that marks a table as owned by this strategy.
    pub(crate) fn table_comment(self) -> String {
        format!("distlock:{}", self.as_str())
    }

    /// What a client of this strategy guarantees.
    pub fn capabilities(self) -> Capabilities {
        // The name's doorbell hands the lock to a waiter of version_cas and
        // unique_insert (see `bell`), InnoDB's lock queue one of for_update.
        let polling = Capabilities::new()
            .fencing(FencingGuarantee::Strict)
            .wake(Wake::Push)
            .token_durability(TokenDurability::Persisted)
            .min_ttl(MIN_POLLING_TTL)
            .ttl_granularity(Duration::from_micros(1))
            .primitives(Primitives::ALL)
            .min_hold(Support::Offered)
            .state_collection(Support::Offered);
        match self {
            Strategy::VersionCas | Strategy::UniqueInsert => polling,
            // The server ends an idle holder's session after `wait_timeout`,
            // whole seconds: the lock's server expiry.
            Strategy::ForUpdate => polling
                .session_bound(true)
                .min_hold(Support::NotOffered(
                    "strategy=for_update holds a row lock that ends with its holder's connection; use strategy=version_cas for a minimum hold",
                ))
                .min_ttl(Duration::from_secs(1))
                .ttl_granularity(Duration::from_secs(1)),
        }
    }
}

impl FromStr for Strategy {
    type Err = LockError;

    fn from_str(s: &str) -> Result<Self, LockError> {
        match s {
            "version_cas" => Ok(Strategy::VersionCas),
            "unique_insert" => Ok(Strategy::UniqueInsert),
            "for_update" => Ok(Strategy::ForUpdate),
            other => Err(LockError::config(
                BACKEND,
                format!(
                    "unknown strategy `{other}`; use version_cas (the default), unique_insert or for_update"
                ),
            )),
        }
    }
}

/// The one lock table. `name` is the (possibly hashed) lock name, `owner` a
/// random value per acquisition, `fence` the version column / fencing counter,
/// `expires_at` the server-clock expiry. The comment records the strategy that
/// owns the table, so two strategies never share one by accident.
pub(crate) const CREATE_TABLE: &str = include_str!("sql/create_table.sql");
/// The table's comment, to check which strategy owns it.
pub(crate) const TABLE_COMMENT: &str = include_str!("sql/table_comment.sql");

// version_cas's statements are distlock-sql's (`sql/mysql/cas_*.sql` there).

/// The wait for a name's doorbell (see `bell`), sent as text: `{bell}` its
/// name, `{seconds}` how long to wait (with microseconds; MySQL rounds to
/// whole seconds). Whether it took the bell (1), and how many µs it waited by
/// the server's clock (`NOW(6)` is the statement's start, `SYSDATE(6)` read
/// after the wait).
pub(crate) const BELL_WAIT: &str = include_str!("sql/bell_wait.sql");
/// [`BELL_WAIT`] with the attempt's statement `{then}` in the same text (each
/// statement of a text has its own `NOW(6)`: the CAS's is after the wait),
/// and the insert id reset before it: whether the wait took the bell, the µs
/// it waited, and the statement's insert id and matched rows.
pub(crate) const BELL_WAIT_THEN: &str = include_str!("sql/bell_wait_then.sql");
/// After the release, in the same text: gives the bell back.
pub(crate) const BELL_GIVE_BACK: &str = include_str!("sql/bell_give_back.sql");

/// unique_insert acquire: the primary key rejects a second holder (error 1062).
pub(crate) const UNIQUE_INSERT: &str = include_str!("sql/unique_insert.sql");
/// unique_insert takeover of an expired row, in one guarded statement. Insert id:
/// `HELD_FLAG` (distlock-sql's) exactly if taken over; `HELD_FLAG | remaining µs` if still held; 0 if
/// the row is gone (released meanwhile: insert again).
pub(crate) const UNIQUE_TAKEOVER: &str = include_str!("sql/unique_takeover.sql");
/// unique_insert renew: compare owner. Matched rows: 1 if still ours.
pub(crate) const UNIQUE_RENEW: &str = include_str!("sql/unique_renew.sql");
/// unique_insert release (and the undo of an abandoned acquire): the row exists
/// only while held. A DELETE reports the rows it deleted, whatever
/// `CLIENT_FOUND_ROWS` says.
pub(crate) const UNIQUE_RELEASE: &str = include_str!("sql/unique_release.sql");

/// unique_insert, for_update, `lock_in`: raises an existing counter row and
/// stamps it with the end of the lease it is raised for (`unique_insert`,
/// `lock_in`: 0 µs, the raise itself); the new value is the insert id, 0 when
/// the name has no counter row. Binds: µs, counter name.
pub(crate) const COUNTER_BUMP: &str = include_str!("sql/counter_bump.sql");
/// Creates a missing counter row above the floor (see [`COUNTER_IDLE`] and
/// `counter`). Binds: counter name, floor.
pub(crate) const COUNTER_INSERT: &str = include_str!("sql/counter_insert.sql");
/// `lock_in`: stamps a counter row with now, before its name's row is locked,
/// so that no collection deletes the row meanwhile. Binds: counter name.
pub(crate) const COUNTER_TOUCH: &str = include_str!("sql/counter_touch.sql");
/// for_update's collection (see `counter`): up to `limit` counters idle for
/// `state_ttl`, each with whether its lock row exists. Binds: µs, limit.
pub(crate) const HELD_IDLE: &str = include_str!("sql/held_idle.sql");
/// for_update's collection: locks the rows named (`{names}`: one `?` each)
/// that no transaction holds, skipping the others; each with its fence and
/// whether it is idle. Binds: `state_ttl` µs, the names.
///
/// This statement and the two below name the primary key: on a small table
/// the optimizer would scan it whole for a long `IN` list, and a `DELETE`
/// that scans waits for the lock of every row it meets, a holder's included
/// (only `UPDATE` skips rows it would not change), until the 1 s lock wait
/// ends it, on every retry.
pub(crate) const HELD_LOCK: &str = include_str!("sql/held_lock.sql");
/// for_update's collection: stamps the counters of held names with now, so
/// that they leave the oldest idle rows the next collection looks at. Binds:
/// the names.
pub(crate) const HELD_RESTAMP: &str = include_str!("sql/held_restamp.sql");
/// for_update's collection: deletes the rows named, at or below the floor.
/// Binds: the names, the floor.
pub(crate) const HELD_DELETE: &str = include_str!("sql/held_delete.sql");
/// unique_insert: how the sweep finds idle rows, lock rows and counter rows
/// alike: last used (a counter's last raise, a lock row's expiry) more than
/// `state_ttl` ago, and never the counter of a name whose lock row is live.
pub(crate) const COUNTER_IDLE: Idle = Idle {
    max: include_str!("sql/counter_idle_max.sql"),
    sweep: include_str!("sql/counter_sweep.sql"),
};

/// Every autocommit connection: a statement waits at most 1 s (the least
/// MySQL allows) for a row lock another transaction holds, then gets 1205 and
/// is retried with backoff within the caller's wait, instead of hanging for the
/// server default (50 s) until the reply timeout closes the connection.
pub(crate) const ROW_LOCK_WAIT: &str = "SET SESSION innodb_lock_wait_timeout = 1";

/// for_update, once per holder connection: no gap locks (a missing row locks
/// nothing), and every statement runs in a transaction until it ends.
pub(crate) const HOLDER_ISOLATION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
/// See [`HOLDER_ISOLATION`].
pub(crate) const HOLDER_NO_AUTOCOMMIT: &str = "SET SESSION autocommit = 0";
/// for_update: how long the server waits for the row lock, and how long it keeps
/// an idle holder's session (and so its lock) without a keepalive. Whole seconds.
pub(crate) const HOLDER_TIMEOUTS: &str =
    "SET SESSION innodb_lock_wait_timeout = ?, SESSION wait_timeout = ?";
/// for_update: takes the row lock, waiting server-side, and tags the row with the
/// holder's connection id in the same statement (see [`Statements::lock_row`]).
pub(crate) const LOCK_ROW: &str = include_str!("sql/lock_row.sql");
/// for_update with `Wait::No`: takes the row lock or fails at once (an `UPDATE`
/// cannot say `NOWAIT`); the tagging [`LOCK_ROW`] follows, on a row then ours.
pub(crate) const FOR_UPDATE_NOWAIT: &str = include_str!("sql/for_update_nowait.sql");
/// for_update: creates a missing lock row, committed at once (autocommit), so
/// that ending a holder's transaction never takes the row away.
pub(crate) const FOR_UPDATE_INSERT_ROW: &str = include_str!("sql/for_update_insert_row.sql");
/// for_update keepalive, and the raw round trip: proves the session (and its
/// transaction) is alive and resets the server's idle timer.
pub(crate) const KEEPALIVE: &str = "SELECT 1";
/// for_update release, and the end of a refused attempt: rolls the tag back and
/// frees the row lock. The explicit clauses make it immune to a server's
/// `completion_type` (`CHAIN` would open a new transaction, `RELEASE` would
/// disconnect): its OK means the session is alive and outside any transaction.
pub(crate) const END_TRANSACTION: &str = "ROLLBACK AND NO CHAIN NO RELEASE";
/// for_update: after an abandoned holder's rollback, before its connection goes
/// back to the pool: `0` when no transaction is open (MariaDB; MySQL has no such
/// variable, so the check fails there and the connection is closed instead).
pub(crate) const IN_TRANSACTION: &str = "SELECT CAST(@@in_transaction AS SIGNED)";
/// Ends a session whose statement was cut off: a `for_update` waiter given up
/// on (and any lock it got meanwhile), or a polling attempt before its undo.
pub(crate) const KILL_CONNECTION: &str = "KILL CONNECTION ?";
/// `1` while the server lists session `?` (it ends only after its statement).
pub(crate) const SESSION_LISTED: &str =
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?";
/// This connection's server thread id, the argument `KILL` needs.
pub(crate) const CONNECTION_ID: &str = "SELECT CONNECTION_ID()";

/// The statements of one table, built once.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub unique_insert: SqlStr,
    pub unique_takeover: SqlStr,
    pub unique_renew: SqlStr,
    pub unique_release: SqlStr,
    pub counter_bump: SqlStr,
    pub counter_insert: SqlStr,
    pub counter_touch: SqlStr,
    pub held_idle: SqlStr,
    /// [`LOCK_ROW`] for this table; `{name}` is filled in per row.
    lock_row: String,
    pub for_update_nowait: SqlStr,
    pub for_update_insert_row: SqlStr,
    /// `lock_in`: the locking read of a row, in the caller's transaction.
    /// Binds: name.
    pub tx_lock_row: SqlStr,
    /// `lock_in`: whether a row exists (a plain read, locking nothing).
    /// Binds: name.
    pub tx_row_exists: SqlStr,
}

impl Statements {
    pub fn new(table: &TableName) -> Self {
        let build = |template| for_table(template, table);
        Statements {
            unique_insert: build(UNIQUE_INSERT),
            unique_takeover: build(UNIQUE_TAKEOVER),
            unique_renew: build(UNIQUE_RENEW),
            unique_release: build(UNIQUE_RELEASE),
            counter_bump: build(COUNTER_BUMP),
            counter_insert: build(COUNTER_INSERT),
            counter_touch: build(COUNTER_TOUCH),
            held_idle: build(HELD_IDLE),
            lock_row: LOCK_ROW.replace("{table}", table.as_str()),
            for_update_nowait: build(FOR_UPDATE_NOWAIT),
            for_update_insert_row: build(FOR_UPDATE_INSERT_ROW),
            tx_lock_row: build(include_str!("sql/tx_lock_row.sql")),
            tx_row_exists: build(include_str!("sql/tx_row_exists.sql")),
        }
    }

    /// for_update: the locking `UPDATE` of `row`, sent as text with the name as a
    /// hex literal, so that `PROCESSLIST` shows which row a waiting session is
    /// queued on (a prepared statement shows only `?`). Hex digits and the
    /// validated table name are all that is spliced in (the holder's metadata
    /// `meta` is a hex literal too).
    pub fn lock_row(&self, row: &[u8], meta: &str) -> SqlStr {
        let sql = (self.lock_row.replace("{name}", &hex_literal(row)))
            .replace("{holder}", &hex_literal(meta.as_bytes()));
        AssertSqlSafe(sql).into_sql_str()
    }

    /// The `LIKE` pattern (escape character `|`) matching the text of
    /// [`Statements::lock_row`] for every row whose name starts with `prefix`.
    pub fn lock_row_pattern(&self, prefix: &[u8]) -> String {
        let literal = hex_literal(prefix);
        let open = &literal[..literal.len() - 1];
        let text = self.lock_row.replace("{name}", open);
        let escaped = text.split("{holder}").map(|part| {
            part.chars()
                .flat_map(|c| match c {
                    '|' | '%' | '_' => vec!['|', c],
                    c => vec![c],
                })
                .collect::<String>()
        });
        // Any holder's metadata matches.
        let mut pattern = escaped.collect::<Vec<_>>().join("%");
        pattern.push('%');
        pattern
    }

    /// The `CREATE TABLE` for `table`, marked as owned by `strategy`.
    pub fn create_table(table: &TableName, strategy: Strategy) -> SqlStr {
        // The comment is one of our own constants ("distlock:version_cas", ...).
        let sql = CREATE_TABLE
            .replace("{table}", table.as_str())
            .replace("{comment}", &strategy.table_comment());
        AssertSqlSafe(sql).into_sql_str()
    }
}

/// `template` with `{table}` replaced by the validated table name: the only text
/// ever spliced into SQL.
pub(crate) fn for_table(template: &str, table: &TableName) -> SqlStr {
    distlock_sql::table::kept_sql(template.replace("{table}", table.as_str()))
}

/// `template` for `table`, with `{names}` replaced by `count` placeholders.
pub(crate) fn for_names(template: &str, table: &TableName, count: usize) -> SqlStr {
    let names = vec!["?"; count].join(", ");
    let sql = template.replace("{names}", &names);
    AssertSqlSafe(sql.replace("{table}", table.as_str())).into_sql_str()
}

/// What an operator (and the test suite) asks of the table beyond the lock
/// protocol: who holds what, forced deletion, deployment checks.
pub(crate) mod inspect {
    /// The fence of one row, such as a counter row: the last token it issued.
    pub const COUNTER_FENCE: &str = include_str!("sql/counter_fence.sql");
    /// unique_insert force-unlock: deletes the lock row (the counter row stays).
    pub const DELETE_OWNED_ROW: &str = include_str!("sql/delete_owned_row.sql");
    /// for_update: lock rows (not counter rows) in a name range with their
    /// `owner`; run under READ UNCOMMITTED, `owner` is the connection id a
    /// holder's open transaction wrote (every holder rolls it back at the end, so
    /// no committed row has one).
    pub const LOCK_ROWS: &str = include_str!("sql/lock_rows.sql");
    /// for_update: the lock rows no transaction holds; under READ COMMITTED the
    /// probe takes no gap locks and the rows it skips stay untouched.
    pub const LOCK_ROWS_UNLOCKED: &str = include_str!("sql/lock_rows_unlocked.sql");
    /// for_update: the other sessions now running the locking statement of a
    /// name range (a `LIKE` over `PROCESSLIST`'s live statement text), that is,
    /// waiting in the row's lock queue. Without the PROCESS privilege a user sees
    /// its own sessions only: those of the adapter, connected as that user.
    pub const QUEUED_SESSIONS: &str = include_str!("sql/queued_sessions.sql");
    /// The next statement (only) runs at this isolation level.
    pub const NEXT_READ_UNCOMMITTED: &str = "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED";
    /// See [`NEXT_READ_UNCOMMITTED`].
    pub const NEXT_READ_COMMITTED: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";
    /// The server's version string.
    pub const VERSION: &str = "SELECT VERSION()";
    /// Whether InnoDB is available (`YES` or `DEFAULT`).
    pub const INNODB_SUPPORT: &str =
        "SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'";
    /// The lock table's storage engine.
    pub const TABLE_ENGINE: &str = include_str!("sql/table_engine.sql");
    /// `1` on a read-only server (a replica).
    pub const READ_ONLY: &str = "SELECT CAST(@@global.read_only AS SIGNED)";
}
