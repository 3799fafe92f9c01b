//! [`FencedRow`]: one fenced `UPDATE` on a table that carries its own fence
//! column, for writes that touch a single row.

use crate::db::SqlDatabase;
use crate::dialect::render;
use crate::error::map_error;
use crate::ident::Ident;
use distlock_core::fence::{invalid_write, stale};
use distlock_core::{FencingToken, LockError};
use sqlx::mysql::{MySqlArguments, MySqlConnection};
use sqlx::query::Query;
use sqlx::{Arguments, AssertSqlSafe, Encode, Execute, MySql, Type};
use std::fmt::Debug;
use std::sync::Arc;

/// The fenced single-row `UPDATE`, split at `{assignments}`. Binds: the
/// caller's, then token, key, token. `{table}`, `{key}`, `{fence}`.
const ROW_UPDATE: &str = include_str!("sql/mysql/row_update.sql");
/// The row's fence column, read with a lock so it is the latest committed
/// value even inside a REPEATABLE READ transaction. Binds: key.
const ROW_FENCE: &str = include_str!("sql/mysql/row_fence.sql");

/// MySQL and MariaDB: a single-row fenced `UPDATE` for tables that keep the fencing token next to
/// the data, in a column of their own (`BIGINT UNSIGNED NOT NULL`, starting at
/// 0). The token check and the write are one statement, so no transaction is
/// needed:
///
/// ```sql
/// UPDATE `accounts` SET <your assignments>, `fence` = ? WHERE `id` = ? AND `fence` <= ?
/// ```
///
/// The key column must be the primary key or unique, and the row must exist
/// (insert it with fence 0 beforehand). Equal tokens are admitted.
///
/// ```no_run
/// use distlock_sql::FencedRow;
/// use sqlx::AssertSqlSafe;
/// # async fn run(mut conn: sqlx::MySqlConnection, token: distlock_core::FencingToken) -> Result<(), distlock_core::LockError> {
/// let row = FencedRow::new("accounts", "id", "fence")?;
/// let sql = row.update_sql("balance = balance + ?, note = ?");
/// let query = sqlx::query(AssertSqlSafe(sql)).bind(10_i64).bind("deposit");
/// row.execute(&mut conn, query, 42_i64, token).await?; // StaleToken if a newer holder wrote
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRow {
    table: Ident,
    key_column: Ident,
    fence_column: Ident,
    /// The `UPDATE` up to the caller's assignments.
    update_head: Arc<str>,
    /// The `UPDATE` after the caller's assignments.
    update_tail: Arc<str>,
    read_fence: Arc<str>,
}

impl FencedRow {
    /// The fenced rows of `table`, found by `key_column`, with the token in
    /// `fence_column`. Each name must be a plain identifier (1 to 64 ASCII
    /// letters, digits, `_` or `$`, not starting with a digit); anything else
    /// is refused with [`LockError::Config`].
    ///
    /// ```no_run
    /// # fn run() -> Result<(), distlock_core::LockError> {
    /// let row = distlock_sql::FencedRow::new("accounts", "id", "fence")?;
    /// assert!(distlock_sql::FencedRow::new("accounts", "id`--", "fence").is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(table: &str, key_column: &str, fence_column: &str) -> Result<Self, LockError> {
        let table = Ident::new(table, "table name")?;
        let key_column = Ident::new(key_column, "key column name")?;
        let fence_column = Ident::new(fence_column, "fence column name")?;
        let idents = [
            ("table", &table),
            ("key", &key_column),
            ("fence", &fence_column),
        ];
        let update = render(ROW_UPDATE, &idents);
        let (head, tail) = update.split_once("{assignments}").unwrap_or(("", &update));
        Ok(FencedRow {
            update_head: head.into(),
            update_tail: tail.into(),
            read_fence: render(ROW_FENCE, &idents),
            table,
            key_column,
            fence_column,
        })
    }

    /// The fenced `UPDATE` with `assignments` (your own SQL, with `?` for
    /// your values) before the fence's:
    /// `` UPDATE `t` SET <assignments>, `fence` = ? WHERE `id` = ? AND `fence` <= ? ``.
    /// Build a query from it (`sqlx::query(AssertSqlSafe(sql))`), bind your
    /// values, and hand it to [`FencedRow::execute`], which binds the rest.
    /// Empty `assignments` update only the fence.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), distlock_core::LockError> {
    /// let row = distlock_sql::FencedRow::new("accounts", "id", "fence")?;
    /// assert_eq!(
    ///     row.update_sql("balance = ?"),
    ///     "UPDATE `accounts` SET balance = ?, `fence` = ? WHERE `id` = ? AND `fence` <= ?"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn update_sql(&self, assignments: &str) -> String {
        let assignments = assignments.trim();
        let separator = if assignments.is_empty() { "" } else { ", " };
        format!(
            "{}{assignments}{separator}{}",
            self.update_head, self.update_tail
        )
    }

    /// Runs `query` (built from [`FencedRow::update_sql`], with your values
    /// bound) after binding `token`, `key` and `token` for the fence's
    /// placeholders. `Ok` when the row was written: its fence was at most
    /// `token`, and is `token` now.
    ///
    /// sqlx connects with `CLIENT_FOUND_ROWS`, so the server counts matched
    /// rows, not changed ones: a write with an equal token that changes no
    /// value still counts as written. When no row matched, the row's fence is
    /// read (with a shared lock, so it is the latest committed value) to say
    /// why: a higher fence is [`LockError::StaleToken`]; a missing row is
    /// [`LockError::InvalidWrite`] naming the table and key. A query not built
    /// from this row's `update_sql` is refused before any I/O. More than one
    /// matched row (a key column that is not unique) is an `InvalidWrite`;
    /// inside a transaction, roll back on any `Err`.
    ///
    /// ```no_run
    /// # use distlock_core::{FencingToken, LockError};
    /// # async fn run(mut conn: sqlx::MySqlConnection, token: FencingToken) -> Result<(), LockError> {
    /// let row = distlock_sql::FencedRow::new("jobs", "name", "fence")?;
    /// let sql = row.update_sql("state = ?");
    /// let query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind("done");
    /// match row.execute(&mut conn, query, "nightly-report", token).await {
    ///     Ok(()) => println!("written"),
    ///     Err(LockError::StaleToken { highest, .. }) => println!("token {highest} wrote since"),
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn execute<K>(
        &self,
        conn: &mut MySqlConnection,
        mut query: Query<'_, MySql, MySqlArguments>,
        key: K,
        token: FencingToken,
    ) -> Result<(), LockError>
    where
        K: for<'e> Encode<'e, MySql> + Type<MySql> + Clone + Debug + Send,
    {
        let unencodable = |e| {
            invalid_write(format!(
                "a value for the update of `{}` cannot be encoded: {e}",
                self.table.as_str()
            ))
        };
        let mut arguments = query
            .take_arguments()
            .map_err(unencodable)?
            .unwrap_or_default();
        let sql = query.sql();
        let text = sql.as_str();
        if !(text.starts_with(&*self.update_head) && text.ends_with(&*self.update_tail)) {
            return Err(invalid_write(format!(
                "the query is not a fenced update of `{}` (build it from FencedRow::update_sql): {text}",
                self.table.as_str()
            )));
        }
        let raw = token.get();
        arguments.add(raw).map_err(unencodable)?;
        arguments.add(key.clone()).map_err(unencodable)?;
        arguments.add(raw).map_err(unencodable)?;
        let result = sqlx::query_with(sql, arguments)
            .execute(&mut *conn)
            .await
            .map_err(map_error)?;
        match result.rows_affected() {
            1 => Ok(()),
            0 => Err(self.why_not_written(conn, key, token).await?),
            n => Err(invalid_write(format!(
                "the fenced update of `{}` matched {n} rows with `{}` = {key:?}; the key column \
                 must be unique (roll back)",
                self.table.as_str(),
                self.key_column.as_str()
            ))),
        }
    }

    /// The error for an update that matched no row, from the row's fence.
    async fn why_not_written<K>(
        &self,
        conn: &mut MySqlConnection,
        key: K,
        token: FencingToken,
    ) -> Result<LockError, LockError>
    where
        K: for<'e> Encode<'e, MySql> + Type<MySql> + Debug + Send,
    {
        let (table, key_column) = (self.table.as_str(), self.key_column.as_str());
        let row = format!("`{table}` row with `{key_column}` = {key:?}");
        let fence: Option<Option<u64>> = sqlx::query_scalar(AssertSqlSafe(self.read_fence.clone()))
            .bind(key)
            .fetch_optional(conn)
            .await
            .map_err(map_error)?;
        let fence_column = self.fence_column.as_str();
        Ok(match fence {
            None => invalid_write(format!(
                "no {row} exists; insert it (with `{fence_column}` = 0) before fenced updates"
            )),
            Some(None) => invalid_write(format!(
                "the {row} has a NULL `{fence_column}`; set it to 0 (and make the column NOT NULL)"
            )),
            Some(Some(highest)) if highest > token.get() => {
                stale(&row, token, FencingToken::new(highest))
            }
            Some(Some(highest)) => LockError::backend(
                MySql::BACKEND,
                format!(
                    "the {row} did not exist when the fenced update ran, and has appeared since \
                     (fence {highest}); run the update again"
                ),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_sql_puts_the_callers_assignments_before_the_fence() {
        let row = FencedRow::new("t", "id", "fence").unwrap();
        assert_eq!(
            row.update_sql("a = ?, b = b + 1"),
            "UPDATE `t` SET a = ?, b = b + 1, `fence` = ? WHERE `id` = ? AND `fence` <= ?"
        );
        assert_eq!(
            row.update_sql(" "),
            "UPDATE `t` SET `fence` = ? WHERE `id` = ? AND `fence` <= ?"
        );
        assert_eq!(
            &*row.read_fence,
            "SELECT CAST(`fence` AS UNSIGNED) FROM `t` WHERE `id` = ? LOCK IN SHARE MODE"
        );
    }

    #[test]
    fn every_name_is_checked() {
        for (t, k, f) in [("t t", "id", "f"), ("t", "", "f"), ("t", "id", "9f")] {
            assert!(
                matches!(FencedRow::new(t, k, f), Err(LockError::Config { .. })),
                "{t:?} {k:?} {f:?}"
            );
        }
    }
}
