//! The adapter's own small connection pool.
//!
//! Why not `sqlx::PgPool`: the undo of a cut-off statement must end that
//! statement's session, which each connection here knows ([`Session`]);
//! and a connection is handed out again only when its last statement
//! completed and it holds no advisory lock. Idle connections are reused as
//! they are (no ping on checkout).
//!
//! A connection that may hold a session-level advisory lock
//! ([`Conn::may_hold_lock`]) is never taken back until the server confirmed
//! the unlock ([`Conn::unlocked`]): otherwise the pool's next user would carry
//! someone else's lock.

use crate::error::DbError;
use crate::protocol::SESSION_IDENTITY;
use crate::session::Session;
use distlock_core::toolkit::Timeouts;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgQueryResult, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, Postgres};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A statement with its arguments bound.
pub(crate) type Statement = Query<'static, Postgres, PgArguments>;

/// Idle connections older than this are closed rather than reused, so a server
/// or proxy idle timeout never hands us a dead one after a quiet spell.
const MAX_IDLE: Duration = Duration::from_secs(60);

/// A bounded set of connections with the same options.
#[derive(Clone)]
pub(crate) struct Pool(Arc<PoolInner>);

struct PoolInner {
    options: PgConnectOptions,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    connect_timeout: Duration,
    timeout: Duration,
}

struct Idle {
    conn: PgConnection,
    session: Session,
    since: Instant,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // Say goodbye (Terminate) rather than vanish: the server then logs no
        // unexpected EOF.
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
    pub fn new(options: PgConnectOptions, size: u32, timeouts: Timeouts) -> Self {
        let size = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Pool(Arc::new(PoolInner {
            options,
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

    /// How long to wait for a new connection.
    pub fn connect_timeout(&self) -> Duration {
        self.0.connect_timeout
    }

    /// The connect options (for the listener's own connection).
    pub fn options(&self) -> &PgConnectOptions {
        &self.0.options
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
                session: idle.session,
                reusable: true,
                locked: false,
                pool: inner.clone(),
                _permit: permit,
            });
        }
        let mut conn = timed(
            inner.connect_timeout,
            PgConnection::connect_with(&inner.options),
        )
        .await?;
        // Read before anything else runs on it, so every statement that could be
        // cut off has a session to end.
        let identity = sqlx::query(SESSION_IDENTITY).fetch_one(&mut conn);
        let session = Session::from_row(&timed(inner.timeout, identity).await?)?;
        Ok(Conn {
            conn: Some(conn),
            session,
            reusable: true,
            locked: false,
            pool: inner.clone(),
            _permit: permit,
        })
    }

    fn pop_idle(&self) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = self.0.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(candidate) = idle.pop() {
            if now.duration_since(candidate.since) <= MAX_IDLE {
                return Some(candidate);
            }
        }
        None
    }
}

/// One checked-out connection. Dropping it returns it to the pool only if its
/// last statement completed and it holds no advisory lock; otherwise the
/// connection is closed, and the server ends the session and its locks.
pub(crate) struct Conn {
    conn: Option<PgConnection>,
    session: Session,
    reusable: bool,
    /// An advisory lock statement ran since the server last confirmed the
    /// session holds none.
    locked: bool,
    pool: Arc<PoolInner>,
    _permit: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("pid", &self.session.pid)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// The server session of this connection.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Never reuse this connection (its session state is unknown).
    pub fn discard(&mut self) {
        self.reusable = false;
    }

    /// From now on this session may hold an advisory lock.
    pub fn may_hold_lock(&mut self) {
        self.locked = true;
    }

    /// The server confirmed this session holds no advisory lock (and nothing
    /// ran since): it may go back to the pool.
    pub fn unlocked(&mut self) {
        self.locked = false;
    }

    /// Runs a statement with the pool's reply deadline.
    pub async fn execute(&mut self, query: Statement) -> Result<PgQueryResult, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.execute(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a query that returns one row.
    pub async fn fetch_one(&mut self, query: Statement) -> Result<PgRow, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.fetch_one(self.start()?)).await;
        self.finish(outcome)
    }

    /// Runs a query and returns all its rows.
    pub async fn fetch_all(&mut self, query: Statement) -> Result<Vec<PgRow>, DbError> {
        let limit = self.pool.timeout;
        let outcome = timed(limit, query.fetch_all(self.start()?)).await;
        self.finish(outcome)
    }

    fn start(&mut self) -> Result<&mut PgConnection, DbError> {
        // Until the reply is in, the connection may carry a half-read answer: if
        // the statement's future is dropped, the connection must be closed, not
        // reused.
        self.reusable = false;
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
        if !self.reusable || self.locked {
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
