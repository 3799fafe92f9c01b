//! A `for_update` holder's session: the connection whose open transaction
//! holds the row lock, its keepalive, and what becomes of it when the lease is
//! dropped without release.

use crate::error::DbError;
use crate::pool::{Conn, Thread};
use crate::protocol::{END_TRANSACTION, IN_TRANSACTION};
use distlock_sql::held::HeldConnection;
use sqlx::Row;
use std::time::Duration;

/// What a held lock keeps: the connection whose transaction holds the row lock.
#[derive(Debug)]
pub(crate) struct Session {
    pub conn: HeldConnection<Thread>,
    pub ttl: Duration,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Dropped without release (an abandoned lease): keep others out for the
        // ttl, as the other strategies' rows do, then end the transaction. With
        // no runtime the connection is simply closed (it counts as in a
        // transaction, so the pool never takes it back).
        self.conn.abandon(self.ttl, end_abandoned);
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
