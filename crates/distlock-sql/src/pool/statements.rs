//! Running one statement on a checked-out [`Conn`]: with the reply deadline,
//! keeping track of whether its reply came in, and behind a
//! transaction-pooling proxy in a transaction (see the parent module's docs).

use super::{Conn, PoolDialect, Statement};
use crate::db::BoxFuture;
use crate::db_error::DbError;
use sqlx::{Database, Executor, IntoArguments, SqlStr};
use std::time::Duration;

impl<D: PoolDialect> Conn<D>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    /// Runs a statement sent as text (not prepared), waiting at most `limit`:
    /// its text, values included, is what the server's process list shows
    /// while it runs. Behind a transaction-pooling proxy, a text that begins
    /// with `BEGIN` opens a transaction the next statements run in, until one
    /// that begins with `COMMIT` or `ROLLBACK`.
    pub async fn execute_text(
        &mut self,
        sql: SqlStr,
        limit: Duration,
    ) -> Result<<D::Database as Database>::QueryResult, DbError> {
        let first_word = sql.as_str().split_whitespace().next().unwrap_or_default();
        let first_word = first_word.trim_end_matches(';').to_ascii_uppercase();
        let outcome = timed(limit, sqlx::raw_sql(sql).execute(self.start()?)).await;
        if outcome.is_ok() {
            match first_word.as_str() {
                "BEGIN" => self.in_transaction = true,
                "COMMIT" | "ROLLBACK" => self.in_transaction = false,
                _ => {}
            }
        }
        self.finish(outcome)
    }

    /// Runs statements sent as one text (not prepared), waiting at most
    /// `limit`: the rows they return, all result sets' in order.
    pub async fn fetch_all_text(
        &mut self,
        sql: SqlStr,
        limit: Duration,
    ) -> Result<Vec<<D::Database as Database>::Row>, DbError> {
        let outcome = timed(limit, sqlx::raw_sql(sql).fetch_all(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs `query` by `step`, waiting at most `limit`; behind a
    /// transaction-pooling proxy unprepared, and in a transaction of its own
    /// unless one is open.
    async fn run<T>(
        &mut self,
        limit: Duration,
        query: Statement<D::Database>,
        step: impl for<'c> FnOnce(Statement<D::Database>, Executed<'c, D>) -> Step<'c, T>,
    ) -> Result<T, DbError> {
        let (pooler, own) = (self.pool.pooler, !self.in_transaction);
        let conn = self.start()?;
        let outcome = match (pooler, own) {
            (false, _) => timed(limit, step(query, conn)).await,
            (true, false) => timed(limit, step(query.persistent(false), conn)).await,
            (true, true) => timed(limit, in_own_transaction::<D, T>(conn, query, step)).await,
        };
        self.finish(outcome)
    }

    /// Runs a statement with the pool's reply deadline.
    pub async fn execute(
        &mut self,
        query: Statement<D::Database>,
    ) -> Result<<D::Database as Database>::QueryResult, DbError> {
        let limit = self.pool.timeout;
        self.run(limit, query, |query, conn| Box::pin(query.execute(conn)))
            .await
    }

    /// Runs a query and returns its first row, if any, waiting at most `limit`.
    pub async fn fetch_optional_within(
        &mut self,
        query: Statement<D::Database>,
        limit: Duration,
    ) -> Result<Option<<D::Database as Database>::Row>, DbError> {
        self.run(limit, query, |query, conn| {
            Box::pin(query.fetch_optional(conn))
        })
        .await
    }

    /// Runs a query that returns one row.
    pub async fn fetch_one(
        &mut self,
        query: Statement<D::Database>,
    ) -> Result<<D::Database as Database>::Row, DbError> {
        let limit = self.pool.timeout;
        self.run(limit, query, |query, conn| Box::pin(query.fetch_one(conn)))
            .await
    }

    /// Runs a query and returns all its rows.
    pub async fn fetch_all(
        &mut self,
        query: Statement<D::Database>,
    ) -> Result<Vec<<D::Database as Database>::Row>, DbError> {
        let limit = self.pool.timeout;
        self.run(limit, query, |query, conn| Box::pin(query.fetch_all(conn)))
            .await
    }
}

/// The connection a statement step runs on.
type Executed<'c, D> = &'c mut <<D as PoolDialect>::Database as Database>::Connection;
/// One statement's exchange with the server.
type Step<'c, T> = BoxFuture<'c, Result<T, sqlx::Error>>;

/// Runs `query` by `step` unprepared in a transaction of its own on `conn`:
/// behind a transaction-pooling proxy the transaction keeps one server
/// connection for the statement's parse and execute exchanges. A failed
/// statement's transaction is rolled back.
pub(super) async fn in_own_transaction<'c, D: PoolDialect, T>(
    conn: Executed<'c, D>,
    query: Statement<D::Database>,
    step: impl for<'s> FnOnce(Statement<D::Database>, Executed<'s, D>) -> Step<'s, T>,
) -> Result<T, sqlx::Error>
where
    for<'e> &'e mut <D::Database as Database>::Connection: Executor<'e, Database = D::Database>,
{
    sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
    match step(query.persistent(false), &mut *conn).await {
        Ok(done) => {
            sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            Ok(done)
        }
        Err(e) => {
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            Err(e)
        }
    }
}

/// Runs `fut` with a deadline: a statement that gets no reply is an error, never a
/// hang (a partition otherwise blocks forever).
pub async fn timed<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result.map_err(DbError::Sql),
        Err(_) => Err(DbError::TimedOut(limit)),
    }
}
