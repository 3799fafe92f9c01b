//! What an SQL adapter gives the code written once over its tables (the
//! `version_cas` lock in `cas`, the polling wait in `poll`, the semaphore and
//! read-write lock in `shares`): its connections, how a key is bound, how a
//! cut-off session is ended, and its wake-ups if it has any ([`LockTable`]);
//! the values statements bind and how each database binds them (`db`); and
//! the undo of a cut-off attempt, written once for all of them; and the
//! doorbells where the database notifies nobody (`bell`). Not a stable API.

pub mod bell;
mod db;

pub use db::{TableDb, Value};

use bell::Doorbell;

use crate::db::BoxFuture;
use crate::db_error::DbError;
use crate::pool::{Pool, PoolDialect, Statement};
use crate::settle::Settle;
use distlock_core::adapter::{Ownership, WaitUntil};
use distlock_core::toolkit::UndoFuture;
use distlock_core::{Capabilities, LockError, LockKey};
use sqlx::{Arguments, SqlSafeStr, SqlStr};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Which primitive a share table serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// `{table}_sem`.
    Semaphore,
    /// `{table}_rw`.
    RwLock,
}

impl Primitive {
    /// The share table's name: the lock table's plus this.
    pub fn suffix(self) -> &'static str {
        match self {
            Primitive::Semaphore => "_sem",
            Primitive::RwLock => "_rw",
        }
    }

    /// Its word in the table's mark and in wake-up payloads.
    pub fn word(self) -> &'static str {
        match self {
            Primitive::Semaphore => "semaphore",
            Primitive::RwLock => "rwlock",
        }
    }
}

/// Which names an inspection reads.
#[derive(Debug, Clone, Copy)]
pub enum Names<'a> {
    /// Exactly this key's.
    One(&'a LockKey),
    /// Every name starting with this.
    Under(&'a str),
}

/// What an adapter gives the code written once over its tables: its
/// connections, its key layout, how a cut-off session is ended, and its
/// wake-ups if it has any.
pub trait LockTable: fmt::Debug + Send + Sync + 'static {
    /// The adapter's pool dialect.
    type Dialect: PoolDialect<Database: TableDb>;
    /// What a waiter waits on for a release of its name.
    type Waiter: Wake;

    /// The connections for single statements and attempts.
    fn pool(&self) -> &Pool<Self::Dialect>;
    /// What the adapter's clients guarantee.
    fn capabilities(&self) -> Capabilities;
    /// The values that name the namespace (none where the table is the
    /// namespace), in the statements' order.
    fn namespace(&self) -> Vec<Value>;
    /// The values that name `key`'s rows, in the statements' order.
    fn key(&self, key: &LockKey) -> Vec<Value>;
    /// The values that select `names` in the statements that list rows.
    fn names(&self, names: Names<'_>) -> Vec<Value>;
    /// Ends a session whose statement was cut off; returns once it is gone.
    fn end_session(&self, session: Session<Self>) -> BoxFuture<'_, Result<(), DbError>>;
    /// Wakes a waiter of `key` when the lock (`None`) or a share of
    /// `primitive` is released, if the database can tell (otherwise waiters
    /// poll alone). Asked for at an acquire's first busy attempt, after
    /// which the acquire tries again at once: an acquire that wins at once
    /// registers nothing.
    fn waiter(&self, key: &LockKey, primitive: Option<Primitive>) -> Option<Self::Waiter>;
    /// The bells a lock's holders keep and its waiters queue on, where a
    /// release notifies nobody (see [`bell`]); `None` by default.
    fn doorbell(&self) -> Option<&dyn Doorbell<Self::Dialect>> {
        None
    }
}

/// What a waiter of a name waits on for a release of it, and how it tells
/// the name's releases that someone waits where they notify only then.
pub trait Wake: Deref<Target = Notify> + Send + Sync {
    /// Marks the name as waited for, so that its releases notify (once this
    /// returns `true`, until the waiter is dropped). The caller tries again
    /// after a `true`: a release that ran before the mark notified nobody.
    /// `false` (by default: the releases notify anyway, or cannot): nothing
    /// changed.
    fn mark(&self) -> BoxFuture<'_, bool> {
        Box::pin(std::future::ready(false))
    }
}

impl Wake for Arc<Notify> {}

/// The database of table `A`.
pub type Db<A> = <<A as LockTable>::Dialect as PoolDialect>::Database;
/// What identifies a server session of table `A`'s connections.
pub type Session<A> = <<A as LockTable>::Dialect as PoolDialect>::Session;

/// `sql` with `values` bound in order (each encoded as it is bound: the
/// statement keeps no reference to them).
pub fn statement<DB: TableDb>(sql: &SqlStr, values: &[Value]) -> Statement<DB> {
    let bytes = values.iter().map(Value::encoded_len).sum();
    values
        .iter()
        .fold(with_room(sql, values.len(), bytes), DB::bind)
}

/// `sql` with room for `values` values taking about `bytes` encoded (without
/// their length prefixes), which the caller then binds: bound one by one into
/// no room, the arguments grow (and copy) several times per statement.
pub fn with_room<DB: TableDb>(sql: &SqlStr, values: usize, bytes: usize) -> Statement<DB> {
    let mut arguments = DB::Arguments::default();
    arguments.reserve(values, 4 * values + bytes);
    sqlx::query_with(sql.clone(), arguments)
}

/// Runs the autocommit statement `build()` makes, retried under row-lock
/// contention for at most the reply timeout (renew, release, undo and
/// operator actions have no wait of their own), and returns the rows it
/// matched.
pub async fn run_settled<D: PoolDialect<Database: TableDb>>(
    pool: &Pool<D>,
    build: impl Fn() -> Statement<D::Database>,
) -> Result<u64, DbError> {
    let mut retry = Settle::new(WaitUntil::Deadline(Instant::now() + pool.timeout()));
    loop {
        let mut conn = D::Database::connection(pool).await?;
        match D::Database::run(&mut conn, build()).await {
            Ok(done) => return Ok(done),
            Err(e) => retry.again(e).await?,
        }
    }
}

/// Runs a compare-owner statement (renew, release) as [`run_settled`] does:
/// one matched row means it was ours.
pub async fn compare_owner<D: PoolDialect<Database: TableDb>>(
    pool: &Pool<D>,
    build: impl Fn() -> Statement<D::Database>,
) -> Result<Ownership, LockError> {
    match run_settled(pool, build).await.map_err(|e| pool.error(e))? {
        0 => Ok(Ownership::NotHeld),
        _ => Ok(Ownership::Held),
    }
}

/// A ttl in whole microseconds.
pub fn micros(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)
}

/// Builds one statement, again for each retry.
pub type MakeStatement<DB> = Box<dyn Fn() -> Statement<DB> + Send + Sync>;

/// What an abandoned acquire leaves to undo (a [`CancelGuard`]'s state).
///
/// [`CancelGuard`]: distlock_core::toolkit::CancelGuard
pub struct Undo<A: LockTable> {
    /// The table.
    pub table: Arc<A>,
    /// The session whose statement was cut off, if one was: the server may
    /// not even have run it yet, and an undo that overtook it would match
    /// nothing while the statement then wins the lock for nobody.
    pub in_flight: Option<Session<A>>,
    /// The statement that gives back what the attempt may have won (none when
    /// ending the session is the whole undo).
    pub make: Option<MakeStatement<Db<A>>>,
}

impl<A: LockTable> fmt::Debug for Undo<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Undo")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// Runs an [`Undo`] in the background: first ends the cut-off session (a
/// session ends only after its statement is done, so whatever it won is in
/// place), then the statement, retried under row-lock contention for up to
/// the reply timeout. If it cannot run, the ttl (or, for a session, its end)
/// frees what it won.
pub fn undo<A: LockTable>(state: Undo<A>) -> Option<UndoFuture> {
    Some(Box::pin(async move {
        let table = &state.table;
        if let Some(session) = state.in_flight
            && let Err(e) = table.end_session(session).await
        {
            tracing::debug!(error = %e, "could not see a cut-off session end; undoing anyway");
        }
        if let Some(make) = state.make
            && let Err(e) = run_settled(table.pool(), make).await
        {
            tracing::debug!(error = %e, "the undo of an abandoned acquire failed; what it won expires instead");
        }
    }))
}

/// Microseconds left, as the statements compute them (never negative).
pub(crate) fn remaining(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// A table's statements with its names in place (validated identifiers and
/// our own words only).
pub(crate) fn render(template: &str, names: &[(&str, &str)]) -> SqlStr {
    let mut sql = template.trim_end().to_owned();
    for (placeholder, name) in names {
        sql = sql.replace(&format!("{{{placeholder}}}"), name);
    }
    kept_sql(sql)
}

/// A statement text an adapter keeps and sends many times. sqlx copies a
/// text held as a `String` each time it is cloned, which is each time a
/// statement is built from it; held in an `Arc`, a clone is a count.
pub fn kept_sql(sql: String) -> SqlStr {
    sqlx::AssertSqlSafe(Arc::<str>::from(sql)).into_sql_str()
}
