//! The SQL adapters' own small connection pool, written once for both
//! databases. Not a stable API.
//!
//! Why not `sqlx::Pool`: it pings every connection it takes back, which doubles
//! the round trips of a lock cycle; the undo of a cut-off statement must end
//! (or kill) that statement's server session, which each connection here knows
//! ([`PoolDialect::Session`]); and a connection whose statement was cancelled
//! must be closed, never handed out again with a reply still in flight. This
//! pool does exactly that: idle connections are reused as they are, and a
//! connection is only returned when its last statement completed.
//!
//! A connection that may hold server state of its owner (an open transaction
//! with its row locks, a session-level advisory lock) is never taken back until
//! the server confirmed it holds none ([`Conn::holds_nothing`]): otherwise the
//! pool's next user would carry someone else's lock, or a dead session.
//!
//! Behind a transaction-pooling proxy (PgBouncer `pool_mode = transaction`,
//! [`Pool::behind_transaction_pooler`]) a client connection is a server
//! connection only for the length of one transaction, and the driver parses a
//! statement and executes it in two exchanges, each ending outside any
//! transaction: the proxy may hand them to two server connections. So there
//! every statement outside a transaction of its own runs in one (`BEGIN`,
//! statement, `COMMIT`), as an unnamed statement: nothing of it outlives the
//! transaction, and a statement cut off before its `COMMIT` never commits.

pub use crate::db::BoxFuture;
use statements::in_own_transaction;
pub use statements::timed;

mod statements;
use crate::db_error::{DbError, ErrorTexts};
use distlock_core::LockError;
use sqlx::database::HasStatementCache;
use sqlx::query::Query;
use sqlx::{ColumnIndex, Connection, Database, Decode, Executor, IntoArguments, Row, Type};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Idle connections older than this are closed rather than reused, so a server
/// or proxy idle timeout never hands us a dead one after a quiet spell.
const MAX_IDLE: Duration = Duration::from_secs(60);

/// What one adapter's pool needs from its database: the driver, its error type
/// and what a connection knows about its server session.
pub trait PoolDialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Database: Database + HasStatementCache;
    /// The adapter's words for its errors.
    const TEXTS: &'static ErrorTexts;
    /// What identifies (and configures) the server session of a connection.
    type Session: Copy + fmt::Debug + Send + Sync + 'static;

    /// The query that reads a connection's session, run on every new
    /// connection after its setup and before anything else (so every
    /// statement that could be cut off has a session to end).
    const SESSION_QUERY: &'static str;
    /// The session from that query's row.
    fn session(row: &<Self::Database as Database>::Row) -> Result<Self::Session, DbError>;
    /// How long the server keeps this session idle, when set below its default.
    fn idle_limit(_session: &Self::Session) -> Option<Duration> {
        None
    }
}

/// A statement with its arguments bound.
pub type Statement<DB> = Query<'static, DB, <DB as Database>::Arguments>;

/// A bounded set of connections with the same options and session setup.
pub struct Pool<D: PoolDialect>(Arc<PoolInner<D>>);

impl<D: PoolDialect> Clone for Pool<D> {
    fn clone(&self) -> Self {
        Pool(self.0.clone())
    }
}

struct PoolInner<D: PoolDialect> {
    options: <<D::Database as Database>::Connection as Connection>::Options,
    /// The server, without credentials, for errors.
    endpoint: String,
    /// Statements run once on every new connection.
    setup: &'static [&'static str],
    /// Autocommit is off on these connections: any statement may open a
    /// transaction, which must be seen ended before the connection is reused.
    transactional: bool,
    /// Behind a transaction-pooling proxy (see the module docs).
    pooler: bool,
    idle: Mutex<Vec<Idle<D>>>,
    permits: Arc<Semaphore>,
    connect_timeout: Duration,
    timeout: Duration,
}

struct Idle<D: PoolDialect> {
    conn: <D::Database as Database>::Connection,
    session: D::Session,
    since: Instant,
}

impl<D: PoolDialect> Drop for PoolInner<D> {
    fn drop(&mut self) {
        // Say goodbye (COM_QUIT, Terminate) rather than vanish: the server then
        // logs no aborted connections.
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

impl<D: PoolDialect> fmt::Debug for Pool<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("available", &self.0.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl<D: PoolDialect> Pool<D> {
    /// `transactional`: the setup turns autocommit off (see the module docs).
    pub fn new(
        options: <<D::Database as Database>::Connection as Connection>::Options,
        endpoint: String,
        size: u32,
        setup: &'static [&'static str],
        transactional: bool,
        timeouts: distlock_core::toolkit::Timeouts,
    ) -> Self {
        let size = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Pool(Arc::new(PoolInner {
            options,
            endpoint,
            setup,
            transactional,
            pooler: false,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            connect_timeout: timeouts.connect,
            timeout: timeouts.reply,
        }))
    }

    /// This pool reaches its server through a transaction-pooling proxy: each
    /// statement runs in a transaction (its own, or the one its connection
    /// began with [`Conn::execute_text`]) and is never kept prepared (see the
    /// module docs). For a new pool only: a clone made before keeps its mode.
    pub fn behind_transaction_pooler(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.pooler = true;
        }
        self
    }

    /// Whether this pool reaches its server through a transaction-pooling proxy.
    pub fn is_behind_transaction_pooler(&self) -> bool {
        self.0.pooler
    }

    /// The public error for a failed statement, naming the server.
    pub fn error(&self, e: DbError) -> LockError {
        e.into_lock_error(D::TEXTS, &self.0.endpoint)
    }

    /// The per-statement reply deadline.
    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    /// How long to wait for a new connection.
    pub fn connect_timeout(&self) -> Duration {
        self.0.connect_timeout
    }

    /// The connect options (for a connection of one's own, such as a listener).
    pub fn options(&self) -> &<<D::Database as Database>::Connection as Connection>::Options {
        &self.0.options
    }

    /// A connection for exclusive use: an idle one, or a new one. Waits at most the
    /// connect timeout for a free slot.
    pub async fn get(&self) -> Result<Conn<D>, DbError>
    where
        for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        let inner = &self.0;
        let permit =
            tokio::time::timeout(inner.connect_timeout, inner.permits.clone().acquire_owned())
                .await
                .map_err(|_| sqlx::Error::PoolTimedOut)?
                .map_err(|_| sqlx::Error::PoolClosed)?;
        self.with_permit(permit).await
    }

    /// [`Pool::get`] when a slot is free now; `None` when every one is taken.
    pub async fn try_get(&self) -> Option<Result<Conn<D>, DbError>>
    where
        for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        let permit = self.0.permits.clone().try_acquire_owned().ok()?;
        Some(self.with_permit(permit).await)
    }

    async fn with_permit(&self, permit: OwnedSemaphorePermit) -> Result<Conn<D>, DbError>
    where
        for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
        <D::Database as Database>::Arguments: IntoArguments<D::Database>,
    {
        let inner = &self.0;
        // A new connection already ran its setup and session statements, which
        // on an autocommit-off connection may have opened a transaction.
        let (conn, session, holding) = match self.pop_idle() {
            Some(idle) => (idle.conn, idle.session, false),
            None => {
                let connect = <D::Database as Database>::Connection::connect_with(&inner.options);
                let mut conn = timed(inner.connect_timeout, connect).await?;
                for statement in inner.setup {
                    timed(inner.timeout, sqlx::query(*statement).execute(&mut conn)).await?;
                }
                let query = sqlx::query(D::SESSION_QUERY);
                let row = if inner.pooler {
                    let read = in_own_transaction::<D, _>(&mut conn, query, |query, conn| {
                        Box::pin(query.fetch_one(conn))
                    });
                    timed(inner.timeout, read).await?
                } else {
                    timed(inner.timeout, query.fetch_one(&mut conn)).await?
                };
                let session = D::session(&row)?;
                (conn, session, inner.transactional)
            }
        };
        Ok(Conn {
            conn: Some(conn),
            session,
            reusable: true,
            holding,
            in_transaction: false,
            pool: inner.clone(),
            _permit: permit,
        })
    }

    fn pop_idle(&self) -> Option<Idle<D>> {
        let now = Instant::now();
        let mut idle = self.0.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(candidate) = idle.pop() {
            // Well inside the server's own idle timeout, so that it cannot close
            // the session between this check and the next statement.
            let limit = D::idle_limit(&candidate.session)
                .map_or(MAX_IDLE, |limit| limit.mul_f64(0.8).min(MAX_IDLE));
            if now.duration_since(candidate.since) <= limit {
                return Some(candidate);
            }
        }
        None
    }
}

impl<D: PoolDialect> Pool<D>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    /// Runs a read on a pooled connection.
    pub async fn fetch_all(
        &self,
        statement: Statement<D::Database>,
    ) -> Result<Vec<<D::Database as Database>::Row>, LockError> {
        let rows = async { self.get().await?.fetch_all(statement).await };
        rows.await.map_err(|e| self.error(e))
    }

    /// The first column of the first row, if any.
    pub async fn scalar<T>(&self, statement: Statement<D::Database>) -> Result<Option<T>, LockError>
    where
        T: for<'r> Decode<'r, D::Database> + Type<D::Database>,
        usize: ColumnIndex<<D::Database as Database>::Row>,
    {
        let rows = self.fetch_all(statement).await?;
        let first = rows.first().map(|row| row.try_get(0)).transpose();
        first.map_err(|e| self.error(DbError::Sql(e)))
    }
}

/// One checked-out connection. Dropping it returns it to the pool only if its last
/// statement completed and it holds nothing of its owner; otherwise the
/// connection is closed, and the server ends the session and frees what it held.
pub struct Conn<D: PoolDialect> {
    conn: Option<<D::Database as Database>::Connection>,
    session: D::Session,
    reusable: bool,
    /// A statement that may leave a transaction or a lock open ran since the
    /// server last confirmed the session holds none.
    holding: bool,
    /// A transaction begun by [`Conn::execute_text`] is open (tracked behind
    /// a transaction-pooling proxy only).
    in_transaction: bool,
    pool: Arc<PoolInner<D>>,
    _permit: OwnedSemaphorePermit,
}

impl<D: PoolDialect> fmt::Debug for Conn<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl<D: PoolDialect> Conn<D> {
    /// The server session of this connection.
    pub fn session(&self) -> D::Session {
        self.session
    }

    /// The server session, to record settings changed on it.
    pub fn session_mut(&mut self) -> &mut D::Session {
        &mut self.session
    }

    /// Never reuse this connection (its session state is unknown).
    pub fn discard(&mut self) {
        self.reusable = false;
    }

    /// From now on this session may hold a transaction or lock of its owner
    /// (a `BEGIN`, an advisory lock): until [`Conn::holds_nothing`], dropping
    /// it closes it.
    pub fn may_hold(&mut self) {
        self.holding = true;
    }

    /// The server just confirmed that this session holds no transaction or
    /// lock, and nothing ran since: it may go back to the pool.
    pub fn holds_nothing(&mut self) {
        self.holding = false;
    }

    fn start(&mut self) -> Result<&mut <D::Database as Database>::Connection, DbError> {
        // Until the reply is in, the connection may carry a half-read answer: if
        // the statement's future is dropped, the connection must be closed, not
        // reused.
        self.reusable = false;
        self.holding |= self.pool.transactional;
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

impl<D: PoolDialect> Drop for Conn<D> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !self.reusable || self.holding {
            // Dropping the connection closes its socket; the server then ends the
            // session and frees whatever it held.
            return;
        }
        let mut idle = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        idle.push(Idle {
            conn,
            session: self.session,
            since: Instant::now(),
        });
    }
}
