//! The token counter of `advisory` and `lock_in`: one row per name in the
//! advisory table, raised once the name's advisory lock is held, and
//! collected once the name has been idle for `state_ttl`.
//!
//! Invariants:
//! - A counter is raised by a plain `UPDATE` that stamps `expires_at` with
//!   the instant of its last use, coarsely: a stamp at or after that instant
//!   is kept, an older one becomes the instant plus a second. The stamp is
//!   an indexed column, so changing it at every bump made every bump update
//!   the table's indexes instead of the row in place (HOT). Only when the
//!   name has no row does the client create it, in distlock-sql's `state`
//!   transaction: that
//!   transaction first collects at most 16 idle rows of the namespace,
//!   raising the floor row above their fences, and seeds the new row above
//!   the floor (and at least at the server clock in µs). So a name whose row
//!   was collected still gets a token above every earlier one.
//! - A name in use is raised by one `UPDATE` of its own row that matches
//!   only if the row records the name's key. The look for another name
//!   recording the key (a hash collision, refused) runs only for a row that
//!   does not, so a raise plans no scan but its own row's.
//! - Idle means last used more than `state_ttl` ago and its advisory key in
//!   no session's lock nor wait (`pg_locks`, read live by the sweep): the
//!   counter of a name held or waited for is never collected, however long
//!   it has been held. A holder whose key was locked just after the sweep
//!   looked finds its row gone (its `UPDATE` waited for the delete) and
//!   creates it again, above the raised floor.

use crate::backend::Table;
use crate::error::{BACKEND, DbError};
use crate::keys::advisory_key;
use crate::pool::{Conn, Statement};
use distlock_core::adapter::WaitUntil;
use distlock_core::{FencingToken, LockError, LockKey};
use distlock_sql::settle::Settle;
use distlock_sql::table::with_room;
use sqlx::{Row, SqlStr};
use std::time::Instant;

/// What raising a name's counter answered.
pub(crate) enum Counted {
    Token(FencingToken),
    /// The key is recorded for another name (namespace, name).
    Collision(String, String),
    /// The name has no counter row yet.
    Missing,
}

/// The name whose counter is raised: its key, its advisory key and the
/// holder's metadata.
pub(crate) struct Counter<'a> {
    pub key: &'a LockKey,
    pub lock_key: i64,
    pub meta: &'a str,
}

impl Counter<'_> {
    /// Raises the counter once its advisory lock is held, on a connection of
    /// the table's pool, creating the row when missing; contention (the floor
    /// row locked by another creation) is retried for the reply timeout.
    pub async fn raise(&self, table: &Table) -> Result<FencingToken, LockError> {
        let until = WaitUntil::Deadline(Instant::now() + table.pool.timeout());
        let mut retry = Settle::new(until);
        loop {
            let counted = async {
                let mut conn = table.pool.get().await?;
                if let Some(token) = self.bump_recorded(table, &mut conn).await? {
                    return Ok(Counted::Token(token));
                }
                match self.bump(table, &mut conn).await? {
                    Counted::Missing => {
                        let insert = |floor| self.insert(table, floor);
                        table.counters.create_row(table, &mut conn, insert).await?;
                        self.bump(table, &mut conn).await
                    }
                    counted => Ok(counted),
                }
            };
            match counted.await {
                Ok(Counted::Token(token)) => return Ok(token),
                Ok(Counted::Collision(namespace, name)) => {
                    return Err(collision(table, self.key, &namespace, &name));
                }
                Ok(Counted::Missing) => {
                    return Err(table.error(DbError::Protocol(format!(
                        "the counter row of `{}` is missing right after its creation",
                        self.key
                    ))));
                }
                Err(e) => retry.again(e).await.map_err(|e| table.error(e))?,
            }
        }
    }

    /// Creates the name's row if it has none, seeded above the floor, on a
    /// connection of the table's pool (the name's lock not held);
    /// contention is retried for the reply timeout.
    pub async fn create(&self, table: &Table) -> Result<(), LockError> {
        let until = WaitUntil::Deadline(Instant::now() + table.pool.timeout());
        let mut retry = Settle::new(until);
        loop {
            let created = async {
                let mut conn = table.pool.get().await?;
                let insert = |floor| self.insert(table, floor);
                table.counters.create_row(table, &mut conn, insert).await
            };
            match created.await {
                Ok(()) => return Ok(()),
                Err(e) => retry.again(e).await.map_err(|e| table.error(e))?,
            }
        }
    }

    /// The raise of a row that records the name's key, the one statement of
    /// a name in use: `None` when the name has no row, or its row records no
    /// key yet (then [`bump`](Self::bump) looks for another name with it).
    async fn bump_recorded(
        &self,
        table: &Table,
        conn: &mut Conn,
    ) -> Result<Option<FencingToken>, DbError> {
        let bump = self.bound(table, &table.sql.counter_bump);
        let Some(row) = conn
            .fetch_optional_within(bump, table.pool.timeout())
            .await?
        else {
            return Ok(None);
        };
        row.try_get(0)
            .map_err(DbError::Sql)
            .and_then(token)
            .map(Some)
    }

    /// The raise of an existing row that records the key first if no other
    /// name does (or the collision).
    async fn bump(&self, table: &Table, conn: &mut Conn) -> Result<Counted, DbError> {
        let row = conn
            .fetch_one(self.bound(table, &table.sql.tx_bump))
            .await?;
        let decoded = |e| DbError::Sql(e);
        let value: Option<i64> = row.try_get(0).map_err(decoded)?;
        let namespace: Option<String> = row.try_get(1).map_err(decoded)?;
        let name: Option<String> = row.try_get(2).map_err(decoded)?;
        match (value, namespace, name) {
            (Some(value), None, None) => token(value).map(Counted::Token),
            (None, Some(namespace), Some(name)) => Ok(Counted::Collision(namespace, name)),
            (None, None, None) => Ok(Counted::Missing),
            other => Err(DbError::Protocol(format!(
                "the counter statement answered {other:?}"
            ))),
        }
    }

    /// `statement` of `table` bound to the name, its key and the holder's
    /// metadata.
    fn bound(&self, table: &Table, statement: &SqlStr) -> Statement {
        let bytes = table.namespace.len() + self.key.as_str().len() + 8 + self.meta.len();
        with_room(statement, 4, bytes)
            .bind(&*table.namespace)
            .bind(self.key.as_str())
            .bind(self.lock_key)
            .bind(self.meta)
    }

    /// The new row, seeded above `floor`.
    fn insert(&self, table: &Table, floor: u64) -> Statement {
        sqlx::query(table.sql.counter_insert.clone())
            .bind(&*table.namespace)
            .bind(self.key.as_str())
            .bind(self.lock_key)
            .bind(self.meta)
            .bind(i64::try_from(floor).unwrap_or(i64::MAX))
    }
}

/// The fencing token in a counter's value, which is never negative.
pub(crate) fn token(value: i64) -> Result<FencingToken, DbError> {
    u64::try_from(value)
        .map(FencingToken::new)
        .map_err(|_| DbError::Protocol(format!("the counter returned {value}")))
}

/// The refusal of `key`, whose advisory key `table` records for lock `name`
/// of `namespace`.
pub(crate) fn collision(table: &Table, key: &LockKey, namespace: &str, name: &str) -> LockError {
    let hashed = advisory_key(&table.namespace, key);
    LockError::config(
        BACKEND,
        format!(
            "lock `{key}` in namespace `{}` hashes to advisory key {hashed}, which table \"{}\" \
             already records for lock `{name}` in namespace `{namespace}`: the two would share \
             one lock, so this one is refused; rename one of them or use another namespace",
            table.namespace, table.name
        ),
    )
}
