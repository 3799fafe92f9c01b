//! [`Inspect`] over the lock table: who holds a name, what is left under a
//! prefix, an operator's force-unlock, deployment pitfalls and the raw round
//! trip.
//!
//! The polling strategies keep their holder in the row (`owner`,
//! `expires_at`). A `for_update` holder is a transaction holding the row lock.
//! Everything about it is read live, never from InnoDB's lock tables
//! (`INNODB_TRX`, `INNODB_LOCKS`, `INNODB_LOCK_WAITS`: MariaDB serves those from
//! a snapshot it refreshes only after 100 ms without a reader, so back-to-back
//! reads repeat a stale picture). A locked row is one that `FOR UPDATE SKIP
//! LOCKED` skips; its holder's session is the connection id the holder's own
//! locking `UPDATE` wrote into `owner`, uncommitted and so visible under READ
//! UNCOMMITTED only (a force-unlock ends it with `KILL CONNECTION`); its waiters
//! are the sessions that `PROCESSLIST` shows running the locking statement,
//! whose text names the row in hex.

use crate::backend::{Settle, Table};
use crate::error::{DbError, code};
use crate::keys::{counter_name, display_name, exact_range, name_in_text, prefix_range, row_name};
use crate::protocol::inspect::*;
use crate::protocol::{KEEPALIVE, KILL_CONNECTION, Strategy, for_table};
use async_trait::async_trait;
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::{Backoff, Floor, Holder, Inspect};
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use sqlx::Row;
use sqlx::mysql::MySqlRow;
use std::time::{Duration, Instant};

/// How often a force-unlock looks at a row that is locked but names no
/// session before it reports a foreign transaction, and the pause between.
const UNTAGGED_LOOKS: usize = 3;
/// See [`UNTAGGED_LOOKS`].
const UNTAGGED_PAUSE: Duration = Duration::from_millis(20);

/// A `for_update` lock row a transaction holds, with the session id its holder
/// wrote (none when the row is locked by a transaction that is not a holder's).
struct LockedRow {
    name: Vec<u8>,
    session: Option<u64>,
    meta: Option<HolderMeta>,
}

#[async_trait]
impl Inspect for Table {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let row = row_name(key);
        let counter = || self.fence(counter_name(&row));
        if self.strategy == Strategy::ForUpdate {
            let (low, high) = exact_range(&row);
            let Some(locked) = self.locked_rows(low, high).await?.pop() else {
                return Ok(None);
            };
            let owner = match locked.session {
                Some(id) => format!("session {id}"),
                None => "a transaction that is not a distlock holder".into(),
            };
            let holder = Holder::new(owner, counter().await?, None);
            return Ok(Some(holder.with_meta(locked.meta)));
        }
        let Some(holder) = self.cas.holder(self, key).await? else {
            return Ok(None);
        };
        Ok(Some(match self.strategy {
            Strategy::VersionCas => holder,
            _ => Holder::new(holder.owner, counter().await?, holder.expires_in)
                .with_meta(holder.meta),
        }))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        if self.strategy == Strategy::ForUpdate {
            let (low, high) = prefix_range(prefix.as_bytes());
            let locked = self.locked_rows(low, high).await?;
            let mut lines: Vec<String> = locked
                .iter()
                .map(|row| match row.session {
                    Some(id) => format!("row `{}` locked by session {id}", display_name(&row.name)),
                    None => format!("row `{}` locked by a transaction", display_name(&row.name)),
                })
                .collect();
            lines.extend(self.waiters(prefix).await?);
            return Ok(lines);
        }
        // unique_insert rows exist only while held: an expired one is left over
        // too. version_cas rows stay; only a live owner counts.
        let expired_too = self.strategy == Strategy::UniqueInsert;
        self.cas.residue(self, prefix, expired_too).await
    }

    /// The rows of the lock table (lock and counter rows) and its share
    /// tables.
    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        distlock_sql::state::records(self, self.name.as_str(), prefix, true)
            .await
            .map(Some)
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let row = row_name(key);
        match self.strategy {
            Strategy::ForUpdate => return self.kill_holder(row).await,
            Strategy::VersionCas => return self.cas.clear_owner(self, key).await,
            Strategy::UniqueInsert => {}
        }
        let statement = || sqlx::query(self.sql(DELETE_OWNED_ROW)).bind(&*row);
        Ok(self.run_settled(statement).await? > 0)
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let mut warnings = Vec::new();
        let server: String = self
            .pool
            .scalar(sqlx::query(VERSION))
            .await?
            .unwrap_or_default();
        let mariadb = server.to_ascii_lowercase().contains("mariadb");
        match (version(&server), mariadb) {
            (Some(v), true) if v < (10, 6, 0) => warnings.push(format!(
                "MariaDB {server} is older than 10.6, which the adapter needs (NOWAIT, SKIP LOCKED semantics, \
                 TIMESTAMP(6) handling); upgrade"
            )),
            (Some(v), false) if v < (8, 0, 0) => warnings.push(format!(
                "MySQL {server} is older than 8.0, which the adapter needs; upgrade"
            )),
            (None, _) => warnings.push(format!("cannot read the server version ({server:?})")),
            _ => {}
        }
        let innodb: Option<String> = self.pool.scalar(sqlx::query(INNODB_SUPPORT)).await?;
        if !matches!(innodb.as_deref(), Some("YES" | "DEFAULT")) {
            warnings.push(
                "InnoDB is not available: lock rows need a transactional engine with row locks \
                 (MyISAM or MEMORY tables lose locks and counters, and for_update cannot work)"
                    .into(),
            );
        }
        let table = self.name.as_str();
        let engine = sqlx::query(TABLE_ENGINE).bind(table);
        if let Some(engine) = self.pool.scalar::<Option<String>>(engine).await?.flatten()
            && !engine.eq_ignore_ascii_case("InnoDB")
        {
            warnings.push(format!(
                "the lock table `{table}` uses the {engine} engine, not InnoDB: it has no transactions or row \
                 locks, so locks and fence counters are not safe; ALTER TABLE `{table}` ENGINE=InnoDB"
            ));
        }
        let read_only: Option<i64> = self.pool.scalar(sqlx::query(READ_ONLY)).await?;
        if read_only == Some(1) {
            warnings
                .push("the server is read-only (a replica?): point the lock at the primary".into());
        }
        Ok(warnings)
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some(KEEPALIVE)
    }

    async fn ping(&self) -> Result<(), LockError> {
        let done = async {
            let mut conn = self.pool.get().await?;
            conn.execute(sqlx::query(KEEPALIVE)).await
        };
        done.await.map(drop).map_err(|e| self.error(e))
    }

    fn floor(&self) -> Option<Floor> {
        Some(self.strategy.floor())
    }

    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        match Table::floor_cycle(self, key, ttl).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            }),
            Err(e) => Err(self.error(e)),
        }
    }

    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        self.questions().await.map(Some).map_err(|e| self.error(e))
    }
}

impl Table {
    /// `template` for this table.
    fn sql(&self, template: &str) -> sqlx::SqlStr {
        for_table(template, &self.name)
    }

    /// The fence of row `name`: for a counter row, the last token issued.
    async fn fence(&self, name: Vec<u8>) -> Result<Option<FencingToken>, LockError> {
        let fence: Option<u64> = self
            .pool
            .scalar(sqlx::query(self.sql(COUNTER_FENCE)).bind(name))
            .await?;
        Ok(fence.map(FencingToken::new))
    }

    /// for_update: the lock rows in `[low, high)` that a transaction holds: the
    /// rows there less those a locking read can take, each with the session id
    /// its holder wrote (read uncommitted).
    ///
    /// A collection of idle names (`counter`) locks the rows it deletes, for
    /// a few statements, and writes no session id: a row locked without one
    /// may be such a collection's. Every collection holds the namespace's
    /// floor exclusively from before it locks rows until it commits, so a
    /// shared read of the floor returns once those running now are done; the
    /// rows read after it show no collection that was seen before.
    async fn locked_rows(&self, low: Vec<u8>, high: Vec<u8>) -> Result<Vec<LockedRow>, LockError> {
        let locked = self.locked_rows_now(&low, &high).await?;
        if locked.iter().all(|row| row.session.is_some()) {
            return Ok(locked);
        }
        let settled = async {
            let until = WaitUntil::Deadline(Instant::now() + self.pool.timeout());
            let mut retry = Settle::new(until);
            loop {
                let mut conn = self.pool.get().await?;
                match self.counters.floor(self, &mut conn, false).await {
                    Ok(_) => return Ok(()),
                    Err(e) => retry.again(e).await?,
                }
            }
        };
        settled.await.map_err(|e| self.error(e))?;
        self.locked_rows_now(&low, &high).await
    }

    /// One look of [`Table::locked_rows`].
    async fn locked_rows_now(&self, low: &[u8], high: &[u8]) -> Result<Vec<LockedRow>, LockError> {
        let mut conn = self.pool.get().await.map_err(|e| self.error(e))?;
        let range = |template| sqlx::query(self.sql(template)).bind(low).bind(high);
        let found = async {
            conn.execute(sqlx::query(NEXT_READ_UNCOMMITTED)).await?;
            let all = conn.fetch_all(range(LOCK_ROWS)).await?;
            conn.execute(sqlx::query(NEXT_READ_COMMITTED)).await?;
            let free = conn.fetch_all(range(LOCK_ROWS_UNLOCKED)).await?;
            Ok::<_, DbError>((all, free))
        }
        .await;
        if found.is_err() {
            // The one-shot isolation level may still be pending.
            conn.discard();
        }
        let (all, free) = found.map_err(|e| self.error(e))?;
        let free: Vec<Vec<u8>> = free
            .iter()
            .map(|row| row.try_get(0).map_err(|e| self.error(DbError::Sql(e))))
            .collect::<Result<_, _>>()?;
        let mut locked = Vec::new();
        for row in &all {
            let (name, owner, meta): (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>) =
                decode(row).map_err(|e| self.error(e))?;
            if !free.contains(&name) {
                let session = owner.and_then(|tag| String::from_utf8(tag).ok()?.parse().ok());
                let meta = meta.and_then(|m| HolderMeta::decode(std::str::from_utf8(&m).ok()?));
                locked.push(LockedRow {
                    name,
                    session,
                    meta,
                });
            }
        }
        Ok(locked)
    }

    /// for_update: the sessions queued on a row lock under `prefix`, live from
    /// `PROCESSLIST` (see the module docs).
    async fn waiters(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let pattern = self.sql.lock_row_pattern(prefix.as_bytes());
        let rows = self
            .pool
            .fetch_all(sqlx::query(QUEUED_SESSIONS).bind(pattern))
            .await?;
        rows.iter()
            .map(|row| {
                let (id, text): (u64, String) = decode(row).map_err(|e| self.error(e))?;
                let name =
                    name_in_text(&text).map_or_else(|| "?".into(), |name| display_name(&name));
                Ok(format!("session {id} waits for the row lock on `{name}`"))
            })
            .collect()
    }

    /// for_update force-unlock: ends the session whose transaction holds the
    /// row, found by the id it wrote there. `false` when no transaction holds
    /// the row, or its holder ended meanwhile.
    async fn kill_holder(&self, row: Vec<u8>) -> Result<bool, LockError> {
        // The two reads of `locked_rows` are not one snapshot: a holder that came
        // or went between them shows as a locked row without an id. Look again.
        let mut again = Backoff::new(UNTAGGED_PAUSE, UNTAGGED_PAUSE);
        let mut looks = 0;
        let session = loop {
            let (low, high) = exact_range(&row);
            let Some(locked) = self.locked_rows(low, high).await?.pop() else {
                return Ok(false);
            };
            looks += 1;
            match locked.session {
                Some(session) => break session,
                None if looks < UNTAGGED_LOOKS => {
                    again.pause(UNTAGGED_PAUSE, WaitUntil::Forever).await;
                }
                None => {
                    return Err(self.error(DbError::Protocol(format!(
                        "row `{}` is locked by a transaction that is not a distlock holder (it wrote no \
                         session id); find and end it yourself",
                        display_name(&row)
                    ))));
                }
            }
        };
        let killed = async {
            let mut conn = self.pool.get().await?;
            conn.execute(sqlx::query(KILL_CONNECTION).bind(session))
                .await
        };
        match killed.await {
            Ok(_) => Ok(true),
            Err(e) if e.number() == Some(code::UNKNOWN_THREAD) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }
}

/// A row's columns as a tuple.
fn decode<'r, T>(row: &'r MySqlRow) -> Result<T, DbError>
where
    T: sqlx::FromRow<'r, MySqlRow>,
{
    T::from_row(row).map_err(DbError::Sql)
}

/// `10.11.6-MariaDB` → (10, 11, 6).
fn version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::version;

    #[test]
    fn versions_read_from_mariadb_and_mysql_strings() {
        assert_eq!(version("10.11.6-MariaDB-0+deb12u1"), Some((10, 11, 6)));
        assert_eq!(version("8.0.36"), Some((8, 0, 36)));
        assert_eq!(version("8.4"), Some((8, 4, 0)));
        assert_eq!(version("unknown"), None);
    }
}
