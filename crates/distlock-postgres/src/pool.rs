//! The adapter's connections: distlock-sql's pool, each connection knowing its
//! server [`Session`], so the undo of a cut-off statement can end that
//! statement's session.
//!
//! A connection that may hold a session-level advisory lock
//! ([`Conn::may_hold`]) is never taken back until the server confirmed the
//! unlock ([`Conn::holds_nothing`]).

use crate::error::DbError;
use crate::protocol::SESSION_IDENTITY;
use crate::session::Session;
use distlock_sql::db_error::ErrorTexts;
use distlock_sql::pool::PoolDialect;
use sqlx::Postgres;
use sqlx::postgres::PgRow;

pub(crate) type Pool = distlock_sql::pool::Pool<Session>;
pub(crate) type Conn = distlock_sql::pool::Conn<Session>;
pub(crate) type Statement = distlock_sql::pool::Statement<Postgres>;

impl PoolDialect for Session {
    type Database = Postgres;
    type Session = Session;
    const TEXTS: &'static ErrorTexts = &crate::error::TEXTS;

    const SESSION_QUERY: &'static str = SESSION_IDENTITY;

    fn session(row: &PgRow) -> Result<Session, DbError> {
        Session::from_row(row)
    }
}
