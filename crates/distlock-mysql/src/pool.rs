//! The adapter's connections: distlock-sql's pool, each connection knowing its
//! server thread, so a `for_update` waiter can be killed by its thread id.
//!
//! The holders' pool (`for_update`) has autocommit off: from its first
//! statement on, a checked-out holder connection counts as in a transaction
//! until the server confirmed the end ([`Conn::holds_nothing`], after a
//! `ROLLBACK … NO CHAIN NO RELEASE` answered OK, or a check says so).

use crate::error::DbError;
use crate::protocol::CONNECTION_ID;
use distlock_sql::db_error::ErrorTexts;
use distlock_sql::pool::PoolDialect;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, Row};
use std::time::Duration;

pub(crate) type Pool = distlock_sql::pool::Pool<Thread>;
pub(crate) type Conn = distlock_sql::pool::Conn<Thread>;
pub(crate) type Statement = distlock_sql::pool::Statement<MySql>;

/// The server thread of one connection, and the session settings last set on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Thread {
    /// The server's thread id (`CONNECTION_ID()`).
    pub id: u64,
    /// The holder session timeouts last set on this connection, if any.
    pub timeouts: Option<(u64, u64)>,
    /// The session's `wait_timeout`, when it was set below the server's: idle
    /// for that long, the server closes the connection.
    pub idle_limit: Option<Duration>,
}

impl PoolDialect for Thread {
    type Database = MySql;
    type Session = Thread;
    const TEXTS: &'static ErrorTexts = &crate::error::TEXTS;

    const SESSION_QUERY: &'static str = CONNECTION_ID;

    fn session(row: &MySqlRow) -> Result<Thread, DbError> {
        Ok(Thread {
            id: row.try_get::<u64, _>(0).map_err(DbError::Sql)?,
            timeouts: None,
            idle_limit: None,
        })
    }

    fn idle_limit(thread: &Thread) -> Option<Duration> {
        thread.idle_limit
    }
}
