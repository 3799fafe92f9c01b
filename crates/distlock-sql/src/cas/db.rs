//! `version_cas`'s steps whose SQL or replies differ per database: each names
//! its statements (files in `sql/<db>/cas_*.sql`) and reads the CAS's answer
//! (MySQL through `LAST_INSERT_ID`, with [`HELD_FLAG`] for "held, µs left";
//! PostgreSQL through `RETURNING`) and the rows inspection reads.

use crate::db::BoxFuture;
use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect, Statement};
use crate::shares::display_name;
use crate::state::{Addition, Idle, StateDb};
use crate::table::remaining;
use sqlx::{MySql, Postgres, Row};
use std::time::Duration;

/// MySQL's insert id that marks "held by someone else"; the low bits carry
/// the holder's remaining microseconds. Fences never get near 2^63.
pub const HELD_FLAG: u64 = 1 << 63;

/// The statements of a `version_cas` table on one database. `{table}` is the
/// lock table, `{channel}` its NOTIFY channel (PostgreSQL: its name).
#[derive(Debug)]
pub struct CasSql {
    /// One CAS on a free or expired row. Binds: owner, holder metadata, ttl µs, key.
    pub acquire: &'static str,
    /// The CAS sent after a doorbell's wait (MySQL's, the one database with
    /// doorbells): a free row only with the bell (its keeper goes first) or
    /// after a wait that ran out (its keeper is no woken waiter: a holder
    /// force-unlocked), an expired one either way; a free row whose bell
    /// another keeps answers "held for 1 s", as long as the next wait may last.
    pub acquire_belled: Option<&'static str>,
    /// Creates the row of a name, its fence seeded from the server clock and
    /// above the namespace's floor. Binds: key, floor.
    pub insert_row: &'static str,
    /// Compares owner and fence. Binds: ttl µs, key, owner, token.
    pub renew: &'static str,
    /// Clears the owner, stamps the release's instant and keeps the row (and
    /// notifies, where a waiter marked the name). Binds: key, owner, token.
    pub release: &'static str,
    /// Frees a row an abandoned acquire may have won: its reply never came,
    /// so only the owner is known. Binds: key, owner.
    pub abandon: &'static str,
    /// A live holder's owner, fence, remaining µs and metadata. Binds: key.
    pub holder_row: &'static str,
    /// Owned rows: name and owner. Binds: names, whether expired ones count.
    pub owned_rows: &'static str,
    /// An operator's force-unlock: clears the owner, keeps the fence (and
    /// notifies). Binds: key.
    pub clear_owner: &'static str,
    /// How idle rows are found: on PostgreSQL through a column of their
    /// own, `used_at` (the last acquire or renewal, stamped at most once a
    /// second), because an index on `expires_at`, which every acquire and
    /// release changes, would keep the server from updating a row in place
    /// (HOT).
    pub idle: Idle,
    /// The index that finds them.
    pub idle_index: Addition,
}

/// What the CAS answered.
#[derive(Debug)]
pub enum Reply {
    /// Won with this token.
    Won(u64),
    /// Held for about this much more.
    Held(Duration),
    /// The name has no row yet.
    NoRow,
}

/// A live holder's row, as inspection reads it.
#[derive(Debug)]
pub struct HolderRow {
    /// Its owner value.
    pub owner: String,
    /// Its fence.
    pub fence: Option<u64>,
    /// Time left by the server clock.
    pub remaining: Duration,
    /// Its holder metadata as stored ([`distlock_core::HolderMeta::encode`]).
    pub meta: Option<String>,
}

/// A database `version_cas` runs on.
pub trait CasDb: StateDb {
    /// Its statements.
    const CAS: CasSql;

    /// Runs the CAS and reads its answer.
    fn cas<D: PoolDialect<Database = Self>>(
        conn: &mut Conn<D>,
        query: Statement<Self>,
    ) -> BoxFuture<'_, Result<Reply, DbError>>;

    /// Decodes a `holder_row` row.
    fn holder_row(row: &Self::Row) -> Result<HolderRow, sqlx::Error>;

    /// Decodes an `owned_rows` row: the name (for messages) and the owner.
    fn owned_row(row: &Self::Row) -> Result<(String, String), sqlx::Error>;
}

impl CasDb for MySql {
    const CAS: CasSql = CasSql {
        acquire: include_str!("../sql/mysql/cas_acquire.sql"),
        acquire_belled: Some(include_str!("../sql/mysql/cas_acquire_belled.sql")),
        insert_row: include_str!("../sql/mysql/cas_insert_row.sql"),
        renew: include_str!("../sql/mysql/cas_renew.sql"),
        release: include_str!("../sql/mysql/cas_release.sql"),
        abandon: include_str!("../sql/mysql/cas_abandon.sql"),
        holder_row: include_str!("../sql/mysql/cas_holder_row.sql"),
        owned_rows: include_str!("../sql/mysql/cas_owned_rows.sql"),
        clear_owner: include_str!("../sql/mysql/cas_clear_owner.sql"),
        idle: Idle {
            max: <MySql as StateDb>::STATE.idle_max,
            sweep: <MySql as StateDb>::STATE.sweep,
        },
        idle_index: <MySql as StateDb>::STATE.index,
    };

    /// The insert id: `fence + 1` (the token) if won; `HELD_FLAG | remaining
    /// µs` if held; 0 if the row is absent. sqlx sets `CLIENT_FOUND_ROWS`, so
    /// the matched-row count is checked only beside a token.
    fn cas<D: PoolDialect<Database = MySql>>(
        conn: &mut Conn<D>,
        query: Statement<MySql>,
    ) -> BoxFuture<'_, Result<Reply, DbError>> {
        Box::pin(async move {
            let done = conn.execute(query).await?;
            mysql_reply(done.last_insert_id(), done.rows_affected())
        })
    }

    fn holder_row(row: &<MySql as sqlx::Database>::Row) -> Result<HolderRow, sqlx::Error> {
        let owner: Vec<u8> = row.try_get(0)?;
        Ok(HolderRow {
            owner: String::from_utf8_lossy(&owner).into_owned(),
            fence: Some(row.try_get(1)?),
            remaining: remaining(row.try_get(2)?),
            meta: (row.try_get::<Option<Vec<u8>>, _>(3)?)
                .map(|meta| String::from_utf8_lossy(&meta).into_owned()),
        })
    }

    fn owned_row(row: &<MySql as sqlx::Database>::Row) -> Result<(String, String), sqlx::Error> {
        let (name, owner): (Vec<u8>, Vec<u8>) = (row.try_get(0)?, row.try_get(1)?);
        Ok((
            display_name(&name),
            String::from_utf8_lossy(&owner).into_owned(),
        ))
    }
}

impl CasDb for Postgres {
    const CAS: CasSql = CasSql {
        acquire: include_str!("../sql/postgres/cas_acquire.sql"),
        acquire_belled: None,
        insert_row: include_str!("../sql/postgres/cas_insert_row.sql"),
        renew: include_str!("../sql/postgres/cas_renew.sql"),
        release: include_str!("../sql/postgres/cas_release.sql"),
        abandon: include_str!("../sql/postgres/cas_abandon.sql"),
        holder_row: include_str!("../sql/postgres/cas_holder_row.sql"),
        owned_rows: include_str!("../sql/postgres/cas_owned_rows.sql"),
        clear_owner: include_str!("../sql/postgres/cas_clear_owner.sql"),
        idle: Idle {
            max: include_str!("../sql/postgres/cas_idle_max.sql"),
            sweep: include_str!("../sql/postgres/cas_sweep.sql"),
        },
        idle_index: Addition {
            has: include_str!("../sql/postgres/cas_has_index.sql"),
            add: include_str!("../sql/postgres/cas_add_index.sql"),
        },
    };

    /// One row: the token (`RETURNING fence`) or NULL, and when not won the
    /// holder's remaining µs, or NULL when the row is absent.
    fn cas<D: PoolDialect<Database = Postgres>>(
        conn: &mut Conn<D>,
        query: Statement<Postgres>,
    ) -> BoxFuture<'_, Result<Reply, DbError>> {
        Box::pin(async move {
            let row = conn.fetch_one(query).await?;
            let token: Option<i64> = row.try_get(0).map_err(DbError::Sql)?;
            let left: Option<i64> = row.try_get(1).map_err(DbError::Sql)?;
            match (token, left) {
                (Some(token), _) => u64::try_from(token)
                    .map(Reply::Won)
                    .map_err(|_| DbError::Protocol(format!("the CAS returned token {token}"))),
                (None, Some(left)) => Ok(Reply::Held(remaining(left))),
                (None, None) => Ok(Reply::NoRow),
            }
        })
    }

    fn holder_row(row: &<Postgres as sqlx::Database>::Row) -> Result<HolderRow, sqlx::Error> {
        let fence: i64 = row.try_get(1)?;
        Ok(HolderRow {
            owner: row.try_get(0)?,
            fence: u64::try_from(fence).ok(),
            remaining: remaining(row.try_get(2)?),
            meta: row.try_get(3)?,
        })
    }

    fn owned_row(row: &<Postgres as sqlx::Database>::Row) -> Result<(String, String), sqlx::Error> {
        Ok((row.try_get(0)?, row.try_get(1)?))
    }
}

/// What MySQL's CAS answered: `id`, the insert id, is `fence + 1` (the
/// token) if won, `HELD_FLAG | remaining µs` if held, 0 if the row is absent;
/// `matched`, the rows it matched, is checked beside a token.
pub fn mysql_reply(id: u64, matched: u64) -> Result<Reply, DbError> {
    match id {
        0 => Ok(Reply::NoRow),
        id if id & HELD_FLAG != 0 => Ok(Reply::Held(held_for(id))),
        token if matched == 1 => Ok(Reply::Won(token)),
        token => Err(DbError::Protocol(format!(
            "the CAS returned token {token} but matched {matched} rows"
        ))),
    }
}

/// A MySQL reply that says the row is held, with the holder's remaining µs
/// below [`HELD_FLAG`].
pub fn held_for(reply: u64) -> Duration {
    Duration::from_micros(reply & !HELD_FLAG)
}
