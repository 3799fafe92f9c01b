//! [`Inspect`] over the lock table: who holds a name, what is left under a
//! prefix, an operator's force-unlock, deployment pitfalls and the raw round
//! trip.
//!
//! The polling strategies keep their holder in the row (`owner`,
//! `expires_at`). A `for_update` holder is a transaction holding the row lock,
//! which no column shows: a locked row is one that `FOR UPDATE SKIP LOCKED`
//! skips, its waiters and its holder's session are in InnoDB's lock tables
//! (which need the PROCESS privilege), and a force-unlock ends that session with
//! `KILL CONNECTION`.

use crate::backend::Table;
use crate::error::DbError;
use crate::keys::{counter_name, display_name, exact_range, prefix_range, row_name};
use crate::pool::{Conn, Statement};
use crate::protocol::inspect::*;
use crate::protocol::{FOR_UPDATE, KEEPALIVE, KILL_CONNECTION, ROLLBACK, Strategy, for_table};
use async_trait::async_trait;
use distlock_core::backend::WaitUntil;
use distlock_core::toolkit::{Backoff, Holder, Inspect};
use distlock_core::{FencingToken, LockError, LockKey};
use sqlx::Row;
use sqlx::mysql::MySqlRow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a force-unlock's probe queues on the row lock, in seconds.
const PROBE_WAIT_SECONDS: u64 = 10;
/// How long a force-unlock looks for the session blocking its probe.
const FIND_HOLDER: Duration = Duration::from_secs(5);
/// How often it looks.
const FIND_HOLDER_EVERY: Duration = Duration::from_millis(20);
/// InnoDB answers its lock tables from a cache that it refreshes only when
/// nobody read it for 100 ms: reading more often keeps showing the same stale
/// snapshot, so reads through one client are spaced by a little more.
const INNODB_CACHE_IDLE: Duration = Duration::from_millis(120);

#[async_trait]
impl Inspect for Table {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let row = row_name(key);
        let counter = || self.fence(counter_name(&row));
        if self.strategy == Strategy::ForUpdate {
            let (low, high) = exact_range(&row);
            if self.locked_rows(low, high).await?.is_empty() {
                return Ok(None);
            }
            return Ok(Some(Holder {
                owner: "a session's transaction (for_update stores no owner)".into(),
                token: counter().await?,
                expires_in: None,
            }));
        }
        let found = self
            .fetch_all(sqlx::query(self.sql(HOLDER_ROW)).bind(row.clone()))
            .await?;
        let Some(found) = found.first() else {
            return Ok(None);
        };
        let (owner, fence, remaining): (Vec<u8>, u64, i64) =
            decode(found).map_err(|e| self.error(e))?;
        let token = match self.strategy {
            Strategy::VersionCas => Some(FencingToken::new(fence)),
            _ => counter().await?,
        };
        Ok(Some(Holder {
            owner: String::from_utf8_lossy(&owner).into_owned(),
            token,
            expires_in: Some(Duration::from_micros(remaining.max(0).unsigned_abs())),
        }))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let (low, high) = prefix_range(prefix.as_bytes());
        if self.strategy == Strategy::ForUpdate {
            let locked = self.locked_rows(low, high).await?;
            let mut lines: Vec<String> = locked
                .iter()
                .map(|name| format!("row `{}` locked by a transaction", display_name(name)))
                .collect();
            lines.extend(self.waiters(prefix).await?);
            return Ok(lines);
        }
        // unique_insert rows exist only while held: an expired one is left over
        // too. version_cas rows stay; only a live owner counts.
        let expired_count = self.strategy == Strategy::UniqueInsert;
        let rows = self
            .fetch_all(
                sqlx::query(self.sql(OWNED_ROWS))
                    .bind(low)
                    .bind(high)
                    .bind(expired_count),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let (name, owner): (Vec<u8>, Vec<u8>) = decode(row).map_err(|e| self.error(e))?;
                Ok(format!(
                    "row `{}` owned by {}",
                    display_name(&name),
                    String::from_utf8_lossy(&owner)
                ))
            })
            .collect()
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let row = row_name(key);
        let template = match self.strategy {
            Strategy::ForUpdate => return self.kill_holder(row).await,
            // The fence stays in the row, so the next holder's token is higher.
            Strategy::VersionCas => CLEAR_OWNER,
            Strategy::UniqueInsert => DELETE_OWNED_ROW,
        };
        let statement = sqlx::query(self.sql(template)).bind(row);
        let done = async {
            let mut conn = self.pool.get().await?;
            conn.execute(statement).await
        };
        Ok(done.await.map_err(|e| self.error(e))?.rows_affected() > 0)
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let mut warnings = Vec::new();
        let server: String = self.scalar(sqlx::query(VERSION)).await?.unwrap_or_default();
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
        let innodb: Option<String> = self.scalar(sqlx::query(INNODB_SUPPORT)).await?;
        if !matches!(innodb.as_deref(), Some("YES" | "DEFAULT")) {
            warnings.push(
                "InnoDB is not available: lock rows need a transactional engine with row locks \
                 (MyISAM or MEMORY tables lose locks and counters, and for_update cannot work)"
                    .into(),
            );
        }
        let table = self.name.as_str();
        let engine = sqlx::query(TABLE_ENGINE).bind(table.to_owned());
        if let Some(engine) = self.scalar::<Option<String>>(engine).await?.flatten()
            && !engine.eq_ignore_ascii_case("InnoDB")
        {
            warnings.push(format!(
                "the lock table `{table}` uses the {engine} engine, not InnoDB: it has no transactions or row \
                 locks, so locks and fence counters are not safe; ALTER TABLE `{table}` ENGINE=InnoDB"
            ));
        }
        let read_only: Option<i64> = self.scalar(sqlx::query(READ_ONLY)).await?;
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
}

impl Table {
    /// `template` for this table.
    fn sql(&self, template: &str) -> sqlx::SqlStr {
        for_table(template, &self.name)
    }

    async fn fetch_all(&self, statement: Statement) -> Result<Vec<MySqlRow>, LockError> {
        let rows = async {
            let mut conn = self.pool.get().await?;
            conn.fetch_all(statement).await
        };
        rows.await.map_err(|e| self.error(e))
    }

    /// The first column of the first row, if any.
    async fn scalar<T>(&self, statement: Statement) -> Result<Option<T>, LockError>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
    {
        let rows = self.fetch_all(statement).await?;
        rows.first()
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(|e| self.error(DbError::Sql(e)))
    }

    /// The fence of row `name`: for a counter row, the last token issued.
    async fn fence(&self, name: Vec<u8>) -> Result<Option<FencingToken>, LockError> {
        let fence: Option<u64> = self
            .scalar(sqlx::query(self.sql(COUNTER_FENCE)).bind(name))
            .await?;
        Ok(fence.map(FencingToken::new))
    }

    /// for_update: the lock rows in `[low, high)` that a transaction holds: the
    /// rows there (a holder's uncommitted new row included) less those a locking
    /// read can take.
    async fn locked_rows(&self, low: Vec<u8>, high: Vec<u8>) -> Result<Vec<Vec<u8>>, LockError> {
        let mut conn = self.pool.get().await.map_err(|e| self.error(e))?;
        let range = |template| {
            sqlx::query(self.sql(template))
                .bind(low.clone())
                .bind(high.clone())
        };
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
        let names = |rows: Vec<MySqlRow>| -> Result<Vec<Vec<u8>>, LockError> {
            rows.iter()
                .map(|row| row.try_get(0).map_err(|e| self.error(DbError::Sql(e))))
                .collect()
        };
        let free = names(free)?;
        Ok(names(all)?
            .into_iter()
            .filter(|name| !free.contains(name))
            .collect())
    }

    /// for_update: the transactions queued on a row lock under `prefix`.
    async fn waiters(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let hex: String = prefix.bytes().map(|b| format!("{b:02X}")).collect();
        let statement = sqlx::query(LOCK_WAITERS)
            .bind(format!("%`{}`", self.name))
            .bind(format!("0x{hex}%"));
        let rows = async {
            let mut conn = self.pool.get().await?;
            self.read_innodb(&mut conn, statement).await
        };
        let rows = rows.await.map_err(|e| self.error(e))?;
        rows.iter()
            .map(|row| {
                let (trx, row): (String, String) = decode(row).map_err(|e| self.error(e))?;
                Ok(format!("transaction {trx} waits for the row lock on {row}"))
            })
            .collect()
    }

    /// Reads InnoDB's lock tables with `statement`, at least
    /// [`INNODB_CACHE_IDLE`] after this client's previous read ended, so that
    /// the server refreshed its cache in between.
    async fn read_innodb(
        &self,
        conn: &mut Conn,
        statement: Statement,
    ) -> Result<Vec<MySqlRow>, DbError> {
        let mut last = self.innodb_read.lock().await;
        if let Some(at) = *last {
            tokio::time::sleep_until((at + INNODB_CACHE_IDLE).into()).await;
        }
        let rows = conn.fetch_all(statement).await;
        *last = Some(Instant::now());
        rows
    }

    /// for_update force-unlock: InnoDB names a lock's holder only to its
    /// waiters, so a probe queues on the row and the session blocking it is
    /// killed. `false` when the probe got the row first: nobody held it.
    async fn kill_holder(&self, row: Vec<u8>) -> Result<bool, LockError> {
        let err = |e| self.error(e);
        let mut probe = self.pool.get().await.map_err(err)?;
        // Its session's lock wait changes, and a given-up probe may still queue.
        probe.discard();
        let wait = sqlx::query(PROBE_LOCK_WAIT).bind(PROBE_WAIT_SECONDS);
        probe.execute(wait).await.map_err(err)?;
        let me = probe.id();
        let probed = AtomicBool::new(false);
        let queue = async {
            probe.execute(sqlx::query(BEGIN)).await?;
            let lock = sqlx::query(self.sql(FOR_UPDATE)).bind(row);
            let limit = Duration::from_secs(PROBE_WAIT_SECONDS) + self.pool.timeout();
            let outcome = probe.fetch_optional_within(lock, limit).await;
            probed.store(true, Ordering::SeqCst);
            outcome?;
            probe.execute(sqlx::query(ROLLBACK)).await.map(drop)
        };
        let kill = async {
            let mut conn = self.pool.get().await?;
            let until = WaitUntil::Deadline(Instant::now() + FIND_HOLDER);
            let mut backoff = Backoff::new(FIND_HOLDER_EVERY, FIND_HOLDER_EVERY);
            loop {
                let blocker = sqlx::query(BLOCKING_SESSION).bind(me);
                if let Some(found) = self.read_innodb(&mut conn, blocker).await?.first() {
                    let id: u64 = found.try_get(0)?;
                    conn.execute(sqlx::query(KILL_CONNECTION).bind(id)).await?;
                    return Ok::<_, DbError>(true);
                }
                if probed.load(Ordering::SeqCst) || !backoff.pause(Duration::MAX, until).await {
                    return Ok(false);
                }
            }
        };
        let (queued, killed) = tokio::join!(queue, kill);
        let killed = killed.map_err(err)?;
        if !killed {
            queued.map_err(err)?;
        }
        Ok(killed)
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
