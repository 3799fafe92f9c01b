//! The adapter's own small connection pool.
//!
//! Why not `sqlx::Pool`: it pings (`COM_PING`) every connection it takes back,
//! which doubles the round trips of a lock cycle (and the server counts each ping
//! in `Questions`); a `for_update` waiter must be killable by its server thread
//! id; and a connection whose statement was cancelled must be closed, never
//! handed out again with a reply still in flight. This pool does exactly that:
//! idle connections are reused as they are, a connection is only returned when
//! its last statement completed, and each one knows its thread id.
//!
//! A pool of connections with autocommit off (`for_update`'s holders) also never
//! takes back a connection that may be inside a transaction: from its first
//! statement on, a checked-out holder connection counts as in a transaction
//! until the server confirmed the end ([`Conn::transaction_ended`]). Otherwise
//! it would carry the previous holder's row lock (or a dead session) to the
//! pool's next user.

use crate::error::DbError;
use crate::protocol::CONNECTION_ID;
use distlock_core::toolkit::Timeouts;
use sqlx::mysql::{
    MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlQueryResult, MySqlRow,
};
use sqlx::query::Query;
use sqlx::{Connection, MySql, Row, SqlStr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A statement with its arguments bound.
pub(crate) type Statement = Query<'static, MySql, MySqlArguments>;

/// Idle connections older than this are closed rather than reused, so a server
/// or proxy idle timeout never hands us a dead one after a quiet spell.
const MAX_IDLE: Duration = Duration::from_secs(60);

/// A bounded set of connections with the same options and session setup.
#[derive(Clone)]
pub(crate) struct Pool(Arc<PoolInner>);

struct PoolInner {
    options: MySqlConnectOptions,
    /// Statements run once on every new connection.
    setup: &'static [&'static str],
    /// Autocommit is off on these connections: any statement may open a
    /// transaction, which must be seen ended before the connection is reused.
    transactional: bool,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    connect_timeout: Duration,
    timeout: Duration,
}

struct Idle {
    conn: MySqlConnection,
    id: u64,
    session: Option<(u64, u64)>,
    since: Instant,
    idle_limit: Option<Duration>,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // Say goodbye (COM_QUIT) rather than vanish: the server then logs no
        // aborted connections.
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        if let (false, Ok(runtime)) = (idle.is_empty(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                for conn in idle {
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn.conn.close()).await;
                }
            });
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("available", &self.0.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// `transactional`: the setup turns autocommit off (see the module docs).
    pub fn new(
        options: MySqlConnectOptions,
        size: u32,
        setup: &'static [&'static str],
        transactional: bool,
        timeouts: Timeouts,
    ) -> Self {
        let size = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Pool(Arc::new(PoolInner {
            options,
            setup,
            transactional,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            connect_timeout: timeouts.connect,
            timeout: timeouts.reply,
        }))
    }

    /// The per-statement reply deadline.
    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    /// A connection for exclusive use: an idle one, or a new one. Waits at most the
    /// connect timeout for a free slot.
    pub async fn get(&self) -> Result<Conn, DbError> {
        let inner = &self.0;
        let permit =
            tokio::time::timeout(inner.connect_timeout, inner.permits.clone().acquire_owned())
                .await
                .map_err(|_| DbError::Sql(sqlx::Error::PoolTimedOut))?
                .map_err(|_| DbError::Sql(sqlx::Error::PoolClosed))?;
        if let Some(idle) = self.pop_idle() {
            return Ok(Conn {
                conn: Some(idle.conn),
                id: idle.id,
                session: idle.session,
                idle_limit: idle.idle_limit,
                reusable: true,
                in_transaction: false,
                pool: inner.clone(),
                _permit: permit,
            });
        }
        let conn = timed(
            inner.connect_timeout,
            MySqlConnection::connect_with(&inner.options),
        )
        .await?;
        let mut conn = Conn {
            conn: Some(conn),
            id: 0,
            session: None,
            idle_limit: None,
            reusable: false,
            in_transaction: false,
            pool: inner.clone(),
            _permit: permit,
        };
        for statement in inner.setup {
            conn.execute(sqlx::query(*statement)).await?;
        }
        let row = conn.fetch_one(sqlx::query(CONNECTION_ID)).await?;
        conn.id = row.try_get::<u64, _>(0).map_err(DbError::Sql)?;
        Ok(conn)
    }

    fn pop_idle(&self) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = self.0.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(candidate) = idle.pop() {
            // Well inside the server's own idle timeout, so that it cannot close
            // the session between this check and the next statement.
            let limit = candidate
                .idle_limit
                .map_or(MAX_IDLE, |limit| limit.mul_f64(0.8).min(MAX_IDLE));
            let stale = now.duration_since(candidate.since) > limit;
            if !stale {
                return Some(candidate);
            }
        }
        None
    }
}

/// One checked-out connection. Dropping it returns it to the pool only if its last
/// statement completed and it is not (possibly) inside a transaction; otherwise
/// the connection is closed, and the server rolls back whatever it held.
pub(crate) struct Conn {
    conn: Option<MySqlConnection>,
    id: u64,
    /// The holder session timeouts last set on this connection, if any.
    pub session: Option<(u64, u64)>,
    /// The session's `wait_timeout`, when it was set below the server's: idle
    /// for that long, the server closes the connection.
    pub idle_limit: Option<Duration>,
    reusable: bool,
    /// A statement ran on this autocommit-off connection since the server last
    /// confirmed that no transaction is open.
    in_transaction: bool,
    pool: Arc<PoolInner>,
    _permit: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// The server's thread id for this connection.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Never reuse this connection (its session state is unknown).
    pub fn discard(&mut self) {
        self.reusable = false;
    }

    /// An explicit transaction (`BEGIN`) starts on this connection: until
    /// [`Conn::transaction_ended`], dropping it closes it, so no open
    /// transaction ever goes back to the pool.
    pub fn begin(&mut self) {
        self.in_transaction = true;
    }

    /// The server just confirmed that this connection is outside any transaction
    /// (a `ROLLBACK … NO CHAIN NO RELEASE` answered OK, or a check says so,
    /// and nothing ran since):
    /// it may go back to the pool.
    pub fn transaction_ended(&mut self) {
        self.in_transaction = false;
    }

    /// Runs a statement sent as text (`COM_QUERY`, not prepared), waiting at
    /// most `limit`: its text, values included, is what `PROCESSLIST` shows
    /// while it runs.
    pub async fn execute_text(
        &mut self,
        sql: SqlStr,
        limit: Duration,
    ) -> Result<MySqlQueryResult, DbError> {
        let outcome = timed(limit, sqlx::raw_sql(sql).execute(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a statement with the pool's reply deadline.
    pub async fn execute(&mut self, query: Statement) -> Result<MySqlQueryResult, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.execute(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a query and returns its first row, if any, waiting at most `limit`.
    pub async fn fetch_optional_within(
        &mut self,
        query: Statement,
        limit: Duration,
    ) -> Result<Option<MySqlRow>, DbError> {
        let outcome = timed(limit, query.fetch_optional(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a query that returns one row.
    pub async fn fetch_one(&mut self, query: Statement) -> Result<MySqlRow, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.fetch_one(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a query and returns all its rows.
    pub async fn fetch_all(&mut self, query: Statement) -> Result<Vec<MySqlRow>, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.fetch_all(self.start()?)).await;
        self.finish(outcome)
    }

    fn start(&mut self) -> Result<&mut MySqlConnection, DbError> {
        // Until the reply is in, the connection may carry a half-read answer: if
        // the statement's future is dropped, the connection must be closed, not
        // reused.
        self.reusable = false;
        self.in_transaction |= self.pool.transactional;
        self.conn
            .as_mut()
            .ok_or_else(|| DbError::Protocol("connection already closed".into()))
    }

    fn finish<T>(&mut self, outcome: Result<T, DbError>) -> Result<T, DbError> {
        self.reusable = match &outcome {
            Ok(_) => true,
            Err(e) => e.keeps_connection(),
        };
        outcome
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !self.reusable || self.in_transaction {
            // Dropping the connection closes its socket; the server then ends the
            // session and rolls back whatever it held.
            return;
        }
        let mut idle = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        idle.push(Idle {
            conn,
            id: self.id,
            session: self.session,
            since: Instant::now(),
            idle_limit: self.idle_limit,
        });
    }
}

/// Runs `fut` with a deadline: a statement that gets no reply is an error, never a
/// hang (a partition otherwise blocks forever).
async fn timed<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result.map_err(DbError::Sql),
        Err(_) => Err(DbError::TimedOut(limit)),
    }
}
