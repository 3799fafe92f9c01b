//! The connection a session-bound lock lives on (MySQL's `for_update` row lock
//! in an open transaction, PostgreSQL's advisory lock): its keepalive, its
//! release and its end when abandoned, written once. Not a stable API.
//!
//! A keepalive runs in a task of its own that owns the connection until the
//! reply is in. A renewal is dropped mid-statement when its lease is released
//! or its deadline passes; dropped there, it would leave its reply on the wire
//! for the next statement to read as its own. The next statement waits for the
//! connection instead.

use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect, Statement};
use distlock_core::adapter::Ownership;
use sqlx::{Database, Executor, IntoArguments};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The held connection, shared with a keepalive in flight.
pub struct HeldConnection<D: PoolDialect>(Arc<Mutex<Slot<D>>>);

/// The held connection, or why there is none.
#[derive(Debug)]
enum Slot<D: PoolDialect> {
    Holding(Conn<D>),
    /// A keepalive got no reply: the connection was dropped, but whether the
    /// server still holds the lock is unknown until its idle timeout ends it.
    Unreachable,
    Ended,
}

impl<D: PoolDialect> std::fmt::Debug for HeldConnection<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldConnection").finish_non_exhaustive()
    }
}

impl<D: PoolDialect> HeldConnection<D>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    /// `conn`, whose session now holds the lock.
    pub fn new(conn: Conn<D>) -> Self {
        HeldConnection(Arc::new(Mutex::new(Slot::Holding(conn))))
    }

    /// One keepalive round trip, `statement`, in a task that owns the
    /// connection until its reply is read.
    pub async fn keepalive(&self, statement: Statement<D::Database>) -> Result<Ownership, DbError> {
        let slot = self.0.clone().lock_owned().await;
        match tokio::spawn(keepalive_on(slot, statement)).await {
            Ok(Some(ownership)) => Ok(ownership),
            Ok(None) => Err(unreachable()),
            Err(e) => Err(DbError::Protocol(format!("keepalive task: {e}"))),
        }
    }

    /// Runs the release `statement` on the connection, which goes back to the
    /// pool when `released` confirms, from its rows, that the session now
    /// holds nothing.
    pub async fn release(
        &self,
        statement: Statement<D::Database>,
        released: impl FnOnce(&[<D::Database as Database>::Row]) -> bool,
    ) -> Result<Ownership, DbError> {
        let mut slot = self.0.lock().await;
        let mut conn = match std::mem::replace(&mut *slot, Slot::Ended) {
            Slot::Holding(conn) => conn,
            Slot::Unreachable => return Err(unreachable()),
            Slot::Ended => return Ok(Ownership::NotHeld),
        };
        match conn.fetch_all(statement).await {
            Ok(rows) if released(&rows) => {
                conn.holds_nothing();
                Ok(Ownership::Held)
            }
            Ok(_) => Ok(Ownership::NotHeld),
            Err(DbError::TimedOut(_)) => Err(unreachable()),
            Err(_) => Ok(Ownership::NotHeld),
        }
    }

    /// The lease was dropped without release: it must keep others out until
    /// its `ttl`, as on every backend, so the connection is handed to `end`
    /// after the ttl. A keepalive or release in flight owns the connection and
    /// closes it when it ends.
    pub fn abandon<F>(&self, ttl: Duration, end: impl FnOnce(Conn<D>) -> F + Send + 'static)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(mut slot) = self.0.try_lock() else {
            return;
        };
        let Slot::Holding(conn) = std::mem::replace(&mut *slot, Slot::Ended) else {
            return;
        };
        // With no runtime the connection is simply closed, which ends the
        // session and its lock at once.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(ttl).await;
                end(conn).await;
            });
        }
    }
}

/// The error once the held connection stopped answering: whether the lock is
/// still held is unknown.
fn unreachable() -> DbError {
    DbError::Protocol("the connection holding the lock stopped answering".into())
}

async fn keepalive_on<D: PoolDialect>(
    mut slot: OwnedMutexGuard<Slot<D>>,
    statement: Statement<D::Database>,
) -> Option<Ownership>
where
    for<'c> &'c mut <D::Database as Database>::Connection: Executor<'c, Database = D::Database>,
    <D::Database as Database>::Arguments: IntoArguments<D::Database>,
{
    let conn = match &mut *slot {
        Slot::Holding(conn) => conn,
        Slot::Unreachable => return None,
        Slot::Ended => return Some(Ownership::NotHeld),
    };
    match conn.execute(statement).await {
        Ok(_) => Some(Ownership::Held),
        Err(DbError::TimedOut(_)) => {
            *slot = Slot::Unreachable;
            None
        }
        // The session is gone (killed, terminated, idle timeout, server
        // restarted): so is the lock.
        Err(e) => {
            tracing::debug!(error = %e, "keepalive failed: the holder session ended");
            *slot = Slot::Ended;
            Some(Ownership::NotHeld)
        }
    }
}
