//! [`Inspect`] over the lock table: who holds a name, what is left under a
//! prefix, an operator's force-unlock, deployment pitfalls, the raw round trip,
//! the benchmark floor and the server's own statement count.
//!
//! `version_cas` keeps its holder in the row (`owner`, `expires_at`). An
//! `advisory` holder is a session holding the advisory lock of the row's
//! `lock_key`, read live from `pg_locks` (a force-unlock ends that session,
//! matched by pid and `backend_start`, with `pg_terminate_backend`, which
//! needs the holder's own role, or `pg_read_all_stats` and
//! `pg_signal_backend`).

use crate::advisory::{Attempt, Unlock, attempt};
use crate::backend::Table;
use crate::counter::Counter;
use crate::ending;
use crate::error::{BACKEND, DbError};
use crate::keys::advisory_key;
use crate::protocol::inspect::*;
use crate::protocol::{KEEPALIVE, Strategy, for_table};
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect};
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use sqlx::postgres::PgRow;
use sqlx::{Row, SqlSafeStr};
use std::time::Duration;

/// Statements the server ran, from `pg_stat_statements` when installed.
const STATEMENT_CALLS: &str = "SELECT COALESCE(sum(calls), 0)::BIGINT FROM pg_stat_statements";
/// Whether `pg_stat_statements` can be read here.
const HAS_STATEMENT_STATS: &str = "SELECT to_regclass('pg_stat_statements') IS NOT NULL";

#[async_trait]
impl Inspect for Table {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        if self.strategy == Strategy::Advisory {
            let rows = self.advisory_holders(key.as_str(), true).await?;
            return Ok(rows.into_iter().next().map(|holder| {
                Holder::new(
                    format!("session {}", holder.pid),
                    u64::try_from(holder.fence).ok().map(FencingToken::new),
                    None,
                )
                .with_meta(holder.meta.as_deref().and_then(HolderMeta::decode))
            }));
        }
        self.cas.holder(self, key).await
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        if self.strategy == Strategy::Advisory {
            let rows = self.advisory_holders(prefix, false).await?;
            return Ok(rows
                .into_iter()
                .map(|h| format!("advisory lock of `{}` held by session {}", h.name, h.pid))
                .collect());
        }
        self.cas.residue(self, prefix, false).await
    }

    /// The rows of the lock table, and with `version_cas` its share tables'.
    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let shares = self.strategy == Strategy::VersionCas;
        distlock_sql::state::records(self, self.name.as_str(), prefix, shares)
            .await
            .map(Some)
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        if self.strategy == Strategy::Advisory {
            let Some(holder) = self.advisory_holders(key.as_str(), true).await?.pop() else {
                return Ok(false);
            };
            // Only the session seen holding the key: if it ended meanwhile, a
            // backend that reused its pid has another start and is not hit.
            let Some(started) = holder.started else {
                return Err(LockError::config(
                    BACKEND,
                    format!(
                        "cannot end session {} holding `{}`: this role cannot see when it started \
                         (pg_stat_activity shows backend_start only for the role's own sessions); \
                         connect as the holder's role or grant pg_read_all_stats",
                        holder.pid, holder.name
                    ),
                ));
            };
            let ended = ending::terminate(
                &self.pool,
                Session {
                    pid: holder.pid,
                    started,
                },
            );
            return ended.await.map_err(|e| self.error(e));
        }
        self.cas.clear_owner(self, key).await
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let mut warnings = Vec::new();
        let version: Option<i32> = self.pool.scalar(sqlx::query(VERSION_NUM)).await?;
        match version {
            Some(v) if v < 140000 => warnings.push(format!(
                "PostgreSQL {v} is older than 14: it has no idle_session_timeout, so an advisory lock of \
                 a paused or cut-off holder stays held as long as its TCP connection does; upgrade"
            )),
            Some(_) => {}
            None => warnings.push("cannot read the server version".into()),
        }
        if self.pool.scalar::<bool>(sqlx::query(IN_RECOVERY)).await? == Some(true) {
            warnings
                .push("the server is a standby (read-only): point the lock at the primary".into());
        }
        if self
            .pool
            .scalar::<String>(sqlx::query(FSYNC))
            .await?
            .as_deref()
            == Some("off")
        {
            warnings.push(
                "fsync is off: a server crash can lose committed fence values, and tokens could repeat"
                    .into(),
            );
        }
        if self
            .pool
            .scalar::<String>(sqlx::query(SYNCHRONOUS_COMMIT))
            .await?
            .as_deref()
            == Some("off")
        {
            warnings.push(
                "synchronous_commit is off: a server crash can lose the last acquisitions and their \
                 fence values, so a token could be handed out twice"
                    .into(),
            );
        }
        Ok(warnings)
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some(KEEPALIVE)
    }

    async fn ping(&self) -> Result<(), LockError> {
        // Sent as text: one round trip, and nothing prepared (a transaction
        // pooler could not keep it).
        let ping = async {
            let mut conn = self.pool.get().await?;
            conn.execute_text(KEEPALIVE.into_sql_str(), self.pool.timeout())
                .await
        };
        ping.await.map(drop).map_err(|e| self.error(e))
    }

    fn floor(&self) -> Option<Floor> {
        if self.pool.is_behind_transaction_pooler() {
            // Each statement in a transaction of its own (see `pooler`).
            let name = "BEGIN + CAS UPDATE … RETURNING + COMMIT, BEGIN + release UPDATE, NOTIFY if marked + COMMIT";
            return Some(Floor { name, requests: 6 });
        }
        let name = match self.strategy {
            Strategy::VersionCas => "CAS UPDATE … RETURNING + release UPDATE, NOTIFY if marked",
            Strategy::Advisory => "try-lock with counter bump + unlock",
        };
        Some(Floor { name, requests: 2 })
    }

    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        match self.floor(key, ttl).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            }),
            Err(e) => Err(self.error(e)),
        }
    }

    /// `pg_stat_statements`' calls when the extension is installed in this
    /// database (exact, counted as each statement ends); otherwise the
    /// transactions of `pg_stat_database`, which each session reports with a
    /// delay of up to about 10 s.
    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        let exact = self
            .pool
            .scalar::<bool>(sqlx::query(HAS_STATEMENT_STATS))
            .await?
            == Some(true);
        let count: Option<i64> = match exact {
            true => self.pool.scalar(sqlx::query(STATEMENT_CALLS)).await?,
            false => self.pool.scalar(sqlx::query(TRANSACTIONS)).await?,
        };
        Ok(count.and_then(|n| u64::try_from(n).ok()))
    }
}

impl Table {
    /// `template` for this table.
    fn sql(&self, template: &str) -> sqlx::SqlStr {
        for_table(template, &self.name)
    }

    /// advisory: the names starting with `prefix` (or exactly `prefix`) whose
    /// key a session holds now, with that session.
    async fn advisory_holders(
        &self,
        prefix: &str,
        exact: bool,
    ) -> Result<Vec<AdvisoryHolder>, LockError> {
        let read = sqlx::query(self.sql(ADVISORY_HOLDERS))
            .bind(&*self.namespace)
            .bind(prefix)
            .bind(exact);
        let rows = self.pool.fetch_all(read).await?;
        rows.iter()
            .map(|row| {
                let (name, fence, pid, started, meta) = decode(row).map_err(|e| self.error(e))?;
                Ok(AdvisoryHolder {
                    name,
                    fence,
                    pid,
                    started,
                    meta,
                })
            })
            .collect()
    }

    /// The strategy's statements for one uncontended cycle, on one pooled
    /// connection; `Ok(false)` when the lock was held.
    async fn floor(&self, key: &LockKey, ttl: Duration) -> Result<bool, DbError> {
        if self.strategy == Strategy::VersionCas {
            return self.cas.floor_cycle(self, key, ttl).await;
        }
        let mut conn = self.pool.get().await?;
        let lock_key = advisory_key(&self.namespace, key);
        conn.may_hold();
        let meta = HolderMeta::this_process().encode();
        let attempted = attempt(self, &mut conn, key.as_str(), lock_key, ttl, &meta, None);
        match attempted.await? {
            Attempt::Won(..) => {}
            // A new name: its counter row is created as an acquire does.
            Attempt::Uncounted(_) => {
                let counter = Counter {
                    key,
                    lock_key,
                    meta: &meta,
                };
                let raised = counter.raise(self).await;
                raised.map_err(|e| DbError::Protocol(e.to_string()))?;
            }
            Attempt::Busy => {
                conn.holds_nothing();
                return Ok(false);
            }
        }
        let release = Unlock { key: lock_key };
        let row = conn.fetch_one(release.statement(self)).await?;
        if row.try_get::<bool, _>(0).map_err(DbError::Sql)? {
            conn.holds_nothing();
        }
        Ok(true)
    }
}

/// advisory: a name whose key a session holds.
struct AdvisoryHolder {
    name: String,
    fence: i64,
    pid: i32,
    /// The holding session's start (µs), when this role may see it.
    started: Option<i64>,
    /// The holder's metadata as its acquire wrote it.
    meta: Option<String>,
}

/// A row's columns as a tuple.
pub(crate) fn decode<'r, T>(row: &'r PgRow) -> Result<T, DbError>
where
    T: sqlx::FromRow<'r, PgRow>,
{
    T::from_row(row).map_err(DbError::Sql)
}
