//! [`SqlFence`]: the fence table and the check-and-record step that runs
//! inside the caller's transaction.

use crate::db::{Admitted, Binds, FenceConnection, SqlDatabase, Steps};
use crate::dialect::{Dialect, MYSQL, POSTGRES, render};
use crate::error::{CALLER_CONNECTION, map_error_at};
use crate::ident::Ident;
use distlock_core::fence::{invalid_write, stale, validate_resource};
use distlock_core::{FencingToken, LockError};
use sqlx::Connection;
use std::sync::Arc;

/// Fencing tokens checked inside your own sqlx transaction.
///
/// One table (see the crate docs for its layout) remembers, per resource, the
/// highest token admitted. [`SqlFence::admit`] locks the resource's row in the
/// caller's transaction, compares and records; the caller's own statements
/// after it commit only if the token was admitted, and the row lock keeps
/// every other writer of the resource waiting until this transaction ends.
///
/// ```no_run
/// use distlock_sql::SqlFence;
/// use distlock_core::FencingToken;
/// use sqlx::Connection;
/// # async fn run(mut conn: sqlx::MySqlConnection, token: FencingToken) -> Result<(), Box<dyn std::error::Error>> {
/// let fence = SqlFence::new();
/// fence.create_table(&mut conn).await?; // once, outside any transaction
/// let mut tx = conn.begin().await?;
/// fence.admit(&mut tx, "inventory/sku-42", token).await?; // Err: drop `tx` (rolls back)
/// sqlx::query("UPDATE stock SET n = n - 1 WHERE sku = 42").execute(&mut *tx).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// The same fence works on MySQL/MariaDB and on PostgreSQL: the connection's
/// type picks the SQL (see the crate docs for both tables).
#[derive(Debug, Clone)]
pub struct SqlFence {
    table: Ident,
    mysql: Statements,
    postgres: Statements,
}

/// One dialect's statements, rendered for the table.
#[derive(Debug, Clone)]
struct Statements {
    create_table: Arc<str>,
    admit: Arc<str>,
    highest: Arc<str>,
}

impl Statements {
    fn new(dialect: &Dialect, table: &Ident) -> Self {
        let idents = [("table", table)];
        Statements {
            create_table: render(dialect.create_table, &idents),
            admit: render(dialect.admit, &idents),
            highest: render(dialect.highest, &idents),
        }
    }
}

impl Default for SqlFence {
    fn default() -> Self {
        Self::new()
    }
}

impl SqlFence {
    /// The table used by [`SqlFence::new`].
    pub const DEFAULT_TABLE: &'static str = "distlock_fences";

    /// A fence on the table `distlock_fences`.
    ///
    /// ```no_run
    /// let fence = distlock_sql::SqlFence::new();
    /// assert_eq!(fence.table(), "distlock_fences");
    /// ```
    pub fn new() -> Self {
        Self::on(Ident::known(Self::DEFAULT_TABLE))
    }

    /// A fence on the table `name`: 1 to 64 ASCII letters, digits, `_` or `$`,
    /// not starting with a digit. Anything else is refused with
    /// [`LockError::Config`] before any I/O.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), distlock_core::LockError> {
    /// let fence = distlock_sql::SqlFence::with_table("billing_fences")?;
    /// assert!(distlock_sql::SqlFence::with_table("fences; DROP TABLE x").is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_table(name: &str) -> Result<Self, LockError> {
        Ident::new(name, "fence table name").map(Self::on)
    }

    fn on(table: Ident) -> Self {
        SqlFence {
            mysql: Statements::new(&MYSQL, &table),
            postgres: Statements::new(&POSTGRES, &table),
            table,
        }
    }

    fn sql<DB: SqlDatabase>(&self) -> &Statements {
        match DB::BACKEND {
            "postgres" => &self.postgres,
            _ => &self.mysql,
        }
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        self.table.as_str()
    }

    /// Creates the fence table if it does not exist (an existing table is left
    /// as it is, whatever its layout).
    ///
    /// `CREATE TABLE` commits any open transaction on MySQL and MariaDB, so
    /// this refuses (on every database, for one rule everywhere) (with [`LockError::InvalidWrite`], before any I/O) a
    /// connection on which sqlx has a transaction open. Run it at setup.
    ///
    /// ```no_run
    /// # async fn run(mut conn: sqlx::MySqlConnection) -> Result<(), distlock_core::LockError> {
    /// distlock_sql::SqlFence::new().create_table(&mut conn).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_table<C: FenceConnection + ?Sized>(
        &self,
        conn: &mut C,
    ) -> Result<(), LockError> {
        let conn = conn.connection();
        if conn.is_in_transaction() {
            return Err(invalid_write(format!(
                "create_table on `{}` would commit the open transaction (CREATE TABLE commits \
                 implicitly); create the table outside any transaction, at setup",
                self.table()
            )));
        }
        let sql = self.sql::<C::Database>().create_table.clone();
        match C::Database::execute(conn, sql, Binds::Nothing).await {
            Err(e) if !C::Database::lost_creation_race(&e) => Err(map_error_of::<C::Database>(e)),
            _ => Ok(()),
        }
    }

    /// Admits `token` for `resource` inside the caller's transaction: `Ok` if
    /// it is at least the highest token admitted for `resource` so far (equal
    /// tokens are admitted: one holder may write many times), which it then
    /// records; [`LockError::StaleToken`] with the stored highest if it is
    /// lower.
    ///
    /// One statement, one round trip: an `INSERT … ON DUPLICATE KEY UPDATE`
    /// that creates the resource's row or takes an exclusive lock on the
    /// existing one, and keeps that lock until the transaction ends. So run
    /// the statements the token protects **after** `admit`, in the **same**
    /// transaction, and commit; concurrent writers of the resource wait for
    /// the commit, and then see the token it recorded.
    ///
    /// - `conn` must be inside a transaction opened through sqlx
    ///   (`conn.begin()`, `pool.begin()`, `begin_with(…)`; pass `&mut *tx`):
    ///   in autocommit mode the row lock would end with the statement and the
    ///   check would protect nothing. A connection on which sqlx has no
    ///   transaction open is refused with [`LockError::InvalidWrite`] before
    ///   any I/O (a transaction opened with a raw `BEGIN` statement is not
    ///   seen by sqlx; use `begin_with` for custom start statements).
    /// - On any `Err`, roll back: dropping the sqlx `Transaction` does. A
    ///   stale token has recorded nothing, but the transaction must not
    ///   commit the statements it protects.
    /// - A deadlock (1213) or lock wait timeout (1205) is a transient
    ///   [`LockError::Backend`] ([`crate::is_contention`] is true): roll back
    ///   and run the whole transaction again. A lock wait timeout rolls back
    ///   only the statement, not the transaction, so do roll back.
    /// - Read what the protected writes depend on after `admit`, with locking
    ///   reads (`FOR UPDATE`) or in-place updates (`SET n = n - 1`): under
    ///   REPEATABLE READ a plain `SELECT` may read a snapshot older than the
    ///   previous holder's commit.
    /// - On a stale token the session's `LAST_INSERT_ID()` is left at the
    ///   stored highest (the statement reports it that way).
    ///
    /// ```no_run
    /// # use distlock_core::{FencingToken, LockError};
    /// # async fn run(pool: sqlx::MySqlPool, token: FencingToken) -> Result<(), Box<dyn std::error::Error>> {
    /// let fence = distlock_sql::SqlFence::new();
    /// let mut tx = pool.begin().await?;
    /// match fence.admit(&mut tx, "ledger/42", token).await {
    ///     Ok(()) => {}
    ///     Err(LockError::StaleToken { highest, .. }) => {
    ///         // A newer holder has written; `tx` is dropped, so it rolls back.
    ///         return Err(format!("lost the lock to token {highest}").into());
    ///     }
    ///     Err(other) => return Err(other.into()),
    /// }
    /// sqlx::query("UPDATE ledger SET balance = balance + 10 WHERE id = 42")
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn admit<C: FenceConnection + ?Sized>(
        &self,
        conn: &mut C,
        resource: &str,
        token: FencingToken,
    ) -> Result<(), LockError> {
        validate_resource(resource)?;
        let conn = conn.connection();
        if !conn.is_in_transaction() {
            return Err(invalid_write(format!(
                "admit on `{resource}` needs an open transaction (conn.begin() or pool.begin(), \
                 then pass &mut *tx): in autocommit mode the fence row's lock ends with the \
                 statement and the statements after it would not be protected"
            )));
        }
        let raw = token.get();
        let sql = self.sql::<C::Database>().admit.clone();
        let admitted = C::Database::admit(conn, sql, resource.as_bytes(), raw)
            .await
            .map_err(map_error_of::<C::Database>)?;
        match admitted {
            Admitted::Yes => Ok(()),
            Admitted::Stale(highest) => Err(stale(resource, token, FencingToken::new(highest))),
            Admitted::Odd(other) => Err(LockError::backend(
                C::Database::BACKEND,
                format!(
                    "the fence statement on `{}` reported {other} for token {raw}; is another \
                     program writing the table (or, on PostgreSQL, is the token above 2^63)?",
                    self.table()
                ),
            )),
        }
    }

    /// The highest token admitted for `resource`, or `None` before the first
    /// admitted one.
    ///
    /// A plain read: outside a transaction it is the latest committed value;
    /// inside one, the value in the transaction's snapshot (and its own
    /// [`SqlFence::admit`]). For decisions, use `admit`, never this.
    ///
    /// ```no_run
    /// # async fn run(mut conn: sqlx::MySqlConnection) -> Result<(), distlock_core::LockError> {
    /// let highest = distlock_sql::SqlFence::new().highest(&mut conn, "ledger/42").await?;
    /// println!("highest admitted token: {highest:?}");
    /// # Ok(()) }
    /// ```
    pub async fn highest<C: FenceConnection + ?Sized>(
        &self,
        conn: &mut C,
        resource: &str,
    ) -> Result<Option<FencingToken>, LockError> {
        validate_resource(resource)?;
        let sql = self.sql::<C::Database>().highest.clone();
        let highest = C::Database::read_token(conn.connection(), sql, resource.as_bytes())
            .await
            .map_err(map_error_of::<C::Database>)?;
        Ok(highest.map(FencingToken::new))
    }
}

/// [`crate::map_error`] for a statement on a connection to `DB`.
fn map_error_of<DB: SqlDatabase>(error: sqlx::Error) -> LockError {
    map_error_at(error, CALLER_CONNECTION, DB::BACKEND)
}
