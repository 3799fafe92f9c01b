//! A `for_update` holder's session: the connection whose open transaction
//! holds the row lock, its keepalive, and what becomes of it when the lease is
//! dropped without release.

use crate::error::DbError;
use crate::pool::Conn;
use crate::protocol::{END_TRANSACTION, IN_TRANSACTION, KEEPALIVE};
use distlock_core::adapter::Ownership;
use sqlx::Row;
use std::sync::Arc;
use std::time::Duration;

/// What a held lock keeps: the connection whose transaction holds the row lock.
/// Shared with a keepalive in flight (see `ForUpdate::renew`).
#[derive(Debug)]
pub(crate) struct Session {
    pub conn: Arc<tokio::sync::Mutex<Slot>>,
    pub ttl: Duration,
}

/// The held connection, or why there is none.
#[derive(Debug)]
pub(crate) enum Slot {
    Holding(Conn),
    /// A keepalive got no reply: the connection was dropped, but whether the
    /// server still holds the lock is unknown until its `wait_timeout` ends it.
    Unreachable,
    Ended,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped without release (an abandoned lease): keep others out for the
        // ttl, as the other strategies' rows do, then end the transaction. With
        // no runtime the connection is simply closed (it counts as in a
        // transaction, so the pool never takes it back). A keepalive still in
        // flight keeps the slot: the connection is closed when it ends, and the
        // server frees the lock then rather than after the ttl.
        let Ok(mut slot) = self.conn.try_lock() else {
            return;
        };
        let Slot::Holding(conn) = std::mem::replace(&mut *slot, Slot::Ended) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let ttl = self.ttl;
            runtime.spawn(async move {
                tokio::time::sleep(ttl).await;
                end_abandoned(conn).await;
            });
        }
    }
}

/// An abandoned holder's transaction, after its ttl: roll back, then check that
/// no transaction is open, and only then let the pool have the connection. Any
/// failure (the server already closed the idle session, no such check on
/// MySQL) closes it instead.
async fn end_abandoned(mut conn: Conn) {
    let ended = async {
        conn.execute(sqlx::query(END_TRANSACTION)).await?;
        let row = conn.fetch_one(sqlx::query(IN_TRANSACTION)).await?;
        Ok::<_, DbError>(row.try_get::<i64, _>(0).map_err(DbError::Sql)? == 0)
    };
    match ended.await {
        Ok(true) => conn.holds_nothing(),
        Ok(false) => {
            tracing::warn!("an abandoned for_update session is still in a transaction; closing it")
        }
        Err(e) => {
            tracing::debug!(error = %e, "an abandoned for_update session could not be ended; closing it")
        }
    }
}

/// One keepalive round trip on the held connection, owning the slot until its
/// reply is read; `None` when the connection stopped answering.
pub(crate) async fn keepalive(mut slot: tokio::sync::OwnedMutexGuard<Slot>) -> Option<Ownership> {
    let conn = match &mut *slot {
        Slot::Holding(conn) => conn,
        Slot::Unreachable => return None,
        Slot::Ended => return Some(Ownership::NotHeld),
    };
    match conn.execute(sqlx::query(KEEPALIVE)).await {
        Ok(_) => Some(Ownership::Held),
        Err(DbError::TimedOut(_)) => {
            *slot = Slot::Unreachable;
            None
        }
        // The session is gone (killed, reset, server restarted): so is the lock.
        Err(e) => {
            tracing::debug!(error = %e, "for_update keepalive failed: the holder session ended");
            *slot = Slot::Ended;
            Some(Ownership::NotHeld)
        }
    }
}
