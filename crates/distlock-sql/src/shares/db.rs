//! The share tables' steps whose SQL or replies differ per database: each
//! database names its statements (files in `sql/<db>/shares_*.sql`), reads
//! the counter it raised (MySQL through `LAST_INSERT_ID`, PostgreSQL
//! through `RETURNING`) and decodes rows. Everything else is written once.

use super::{LiveRow, ShareRow};
use crate::db::BoxFuture;
use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect, Statement};
use crate::table::{TableDb, remaining};
use sqlx::mysql::MySqlRow;
use sqlx::postgres::PgRow;
use sqlx::{MySql, Postgres, Row};

/// The statements of the share tables on one database. `{table}` is the
/// share table, `{comment}` its mark, `{channel}` the lock table (PostgreSQL's
/// NOTIFY channel) and `{kind}` the primitive (`semaphore`, `rwlock`).
#[derive(Debug)]
pub struct ShareSql {
    /// Creates the share table if it does not exist.
    pub create: &'static str,
    /// Raises the head's counter and stamps it with the share's expiry,
    /// locking the head; gives the token, or none when the name has no head.
    /// Binds: ttl µs, key.
    pub bump_head: &'static str,
    /// Creates the head, its counter above the floor and the server clock.
    /// Binds: key, limit, floor.
    pub insert_head: &'static str,
    /// Every row of a name, locked. Binds: key.
    pub rows: &'static str,
    /// Every row of a name, without locks. Binds: key.
    pub peek: &'static str,
    /// Binds: limit, key.
    pub set_permits: &'static str,
    /// Writes a share or a place. Binds: key, slot, owner, token, ttl µs.
    pub take: &'static str,
    /// Binds: ttl µs, key, owner, token.
    pub renew: &'static str,
    /// Binds: key, owner, token.
    pub release: &'static str,
    /// Every row of an owner (an acquire given up). Binds: key, owner.
    pub drop_owner: &'static str,
    /// A winner's place. Binds: key, owner, slot.
    pub drop_mark: &'static str,
    /// Expired shares. Binds: key.
    pub drop_expired: &'static str,
    /// Live shares: name, slot, owner, token. Binds: names.
    pub live: &'static str,
    /// An operator's delete of live shares. Binds: key, first slot, last slot.
    pub delete_live: &'static str,
}

/// A database the share tables run on. Its methods run one statement on a
/// connection of an adapter's pool.
pub trait ShareDb: TableDb {
    /// Its statements.
    const SHARES: ShareSql;
    /// The longest table name it takes.
    const IDENT_MAX: usize;

    /// Runs the head's bump, returning the raised counter (0: no head).
    fn bump<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<u64, DbError>>;

    /// The rows of a name, as a taker reads them.
    fn share_rows<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<Vec<ShareRow>, DbError>>;

    /// Live shares, as inspection reads them.
    fn live_rows<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<Vec<LiveRow>, DbError>>;
}

/// The steps both databases run alike (only the row types differ).
macro_rules! common_steps {
    ($db:ty, $rows:ident) => {
        fn share_rows<D: PoolDialect<Database = $db>>(
            conn: &mut Conn<D>,
            query: Statement<$db>,
        ) -> BoxFuture<'_, Result<Vec<ShareRow>, DbError>> {
            Box::pin(async move {
                let rows = conn.fetch_all(query).await?;
                rows.iter()
                    .map(|row| $rows::share_row(row).map_err(DbError::Sql))
                    .collect()
            })
        }

        fn live_rows<D: PoolDialect<Database = $db>>(
            conn: &mut Conn<D>,
            query: Statement<$db>,
        ) -> BoxFuture<'_, Result<Vec<LiveRow>, DbError>> {
            Box::pin(async move {
                let rows = conn.fetch_all(query).await?;
                rows.iter()
                    .map(|row| $rows::live_row(row).map_err(DbError::Sql))
                    .collect()
            })
        }
    };
}

impl ShareDb for MySql {
    const SHARES: ShareSql = mysql::SHARES;
    const IDENT_MAX: usize = 64;

    /// The counter arrives as the insert id (`LAST_INSERT_ID(expr)`), 0 when
    /// no head matched.
    fn bump<D: PoolDialect<Database = MySql>>(
        conn: &mut Conn<D>,
        query: Statement<MySql>,
    ) -> BoxFuture<'_, Result<u64, DbError>> {
        Box::pin(async move { Ok(conn.execute(query).await?.last_insert_id()) })
    }

    common_steps!(MySql, mysql);
}

/// MySQL's row types: unsigned numbers, binary names, 0/1 flags.
mod mysql {
    use super::*;

    pub const SHARES: ShareSql = ShareSql {
        create: include_str!("../sql/mysql/shares_create_table.sql"),
        bump_head: include_str!("../sql/mysql/shares_bump_head.sql"),
        insert_head: include_str!("../sql/mysql/shares_insert_head.sql"),
        rows: include_str!("../sql/mysql/shares_rows.sql"),
        peek: include_str!("../sql/mysql/shares_peek.sql"),
        set_permits: include_str!("../sql/mysql/shares_set_permits.sql"),
        take: include_str!("../sql/mysql/shares_take.sql"),
        renew: include_str!("../sql/mysql/shares_renew.sql"),
        release: include_str!("../sql/mysql/shares_release.sql"),
        drop_owner: include_str!("../sql/mysql/shares_drop_owner.sql"),
        drop_mark: include_str!("../sql/mysql/shares_drop_mark.sql"),
        drop_expired: include_str!("../sql/mysql/shares_drop_expired.sql"),
        live: include_str!("../sql/mysql/shares_live.sql"),
        delete_live: include_str!("../sql/mysql/shares_delete_live.sql"),
    };

    pub fn share_row(row: &MySqlRow) -> Result<ShareRow, sqlx::Error> {
        let live: i64 = row.try_get(3)?;
        Ok(ShareRow {
            slot: row.try_get(0)?,
            permits: row.try_get(1)?,
            owner: row.try_get(2)?,
            live: live != 0,
            remaining: remaining(row.try_get(4)?),
            fence: row.try_get(5)?,
        })
    }

    pub fn live_row(row: &MySqlRow) -> Result<LiveRow, sqlx::Error> {
        let (name, owner): (Vec<u8>, Vec<u8>) = (row.try_get(0)?, row.try_get(2)?);
        Ok(LiveRow {
            name: super::super::display_name(&name),
            slot: row.try_get(1)?,
            owner: String::from_utf8_lossy(&owner).into_owned(),
            fence: row.try_get(3)?,
        })
    }
}

impl ShareDb for Postgres {
    const SHARES: ShareSql = postgres::SHARES;
    const IDENT_MAX: usize = 63;

    /// The counter arrives as the statement's row (`RETURNING fence`), none
    /// when no head matched.
    fn bump<D: PoolDialect<Database = Postgres>>(
        conn: &mut Conn<D>,
        query: Statement<Postgres>,
    ) -> BoxFuture<'_, Result<u64, DbError>> {
        Box::pin(async move {
            let Some(row) = conn.fetch_all(query).await?.into_iter().next() else {
                return Ok(0);
            };
            let fence: i64 = row.try_get(0).map_err(DbError::Sql)?;
            Ok(u64::try_from(fence).unwrap_or(0))
        })
    }

    common_steps!(Postgres, postgres);
}

/// PostgreSQL's row types: `BIGINT` numbers, text names, booleans.
mod postgres {
    use super::*;

    pub const SHARES: ShareSql = ShareSql {
        create: include_str!("../sql/postgres/shares_create_table.sql"),
        bump_head: include_str!("../sql/postgres/shares_bump_head.sql"),
        insert_head: include_str!("../sql/postgres/shares_insert_head.sql"),
        rows: include_str!("../sql/postgres/shares_rows.sql"),
        peek: include_str!("../sql/postgres/shares_peek.sql"),
        set_permits: include_str!("../sql/postgres/shares_set_permits.sql"),
        take: include_str!("../sql/postgres/shares_take.sql"),
        renew: include_str!("../sql/postgres/shares_renew.sql"),
        release: include_str!("../sql/postgres/shares_release.sql"),
        drop_owner: include_str!("../sql/postgres/shares_drop_owner.sql"),
        drop_mark: include_str!("../sql/postgres/shares_drop_mark.sql"),
        drop_expired: include_str!("../sql/postgres/shares_drop_expired.sql"),
        live: include_str!("../sql/postgres/shares_live.sql"),
        delete_live: include_str!("../sql/postgres/shares_delete_live.sql"),
    };

    pub fn share_row(row: &PgRow) -> Result<ShareRow, sqlx::Error> {
        let permits: Option<i64> = row.try_get(1)?;
        let owner: Option<String> = row.try_get(2)?;
        Ok(ShareRow {
            slot: unsigned(row.try_get(0)?)?,
            permits: permits.map(unsigned).transpose()?,
            owner: owner.map(String::into_bytes),
            live: row.try_get(3)?,
            remaining: remaining(row.try_get(4)?),
            fence: unsigned(row.try_get(5)?)?,
        })
    }

    pub fn live_row(row: &PgRow) -> Result<LiveRow, sqlx::Error> {
        Ok(LiveRow {
            name: row.try_get(0)?,
            slot: unsigned(row.try_get(1)?)?,
            owner: row.try_get(2)?,
            fence: unsigned(row.try_get(3)?)?,
        })
    }

    /// A stored `BIGINT` that must fit `T` (a slot, a limit, a token).
    fn unsigned<T: TryFrom<i64>>(n: i64) -> Result<T, sqlx::Error> {
        T::try_from(n).map_err(|_| sqlx::Error::Decode(format!("{n} out of range").into()))
    }
}
