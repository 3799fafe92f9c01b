//! The semaphore (`version_cas` tables only): one row per name in
//! `<table>_semaphores` (the limit in use and the token counter) and one row
//! per slot in `<table>_permits`.
//!
//! Invariants: only the acquire statement sets a slot's owner, and only after
//! locking the name's row, whose counter it raises into the slot in the same
//! statement (`RETURNING` hands slot and token back), so tokens strictly rise
//! per name. It takes the lowest slot below the limit that is free or expired
//! by the server clock, locking candidates `FOR UPDATE`: a slot taken by a
//! concurrent statement is re-checked on its newest version and skipped. A
//! first look skips a name's row another acquire holds (`SKIP LOCKED`), so
//! waiters of a full semaphore never queue behind each other; only when a
//! slot looked free does the next statement queue for the row, and then
//! judges slots on the versions it locks, not on its older snapshot. The
//! limit changes only while no permit is live, judged on the slot rows locked
//! under the name's row; a client with another limit gets `LimitMismatch`.

use crate::backend::{Table, Undo, micros, undo};
use crate::error::{BACKEND, DbError};
use crate::inspect::decode;
use crate::keys::semaphore_payload;
use crate::pool::Conn;
use crate::row_share::{RowShare, ShareKind, release_statement};
use crate::waiting::{Attempts, MAX_PAUSE, Step, wait_for};
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, AcquiredPermit, PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect,
};
use distlock_core::toolkit::{CancelGuard, random_owner};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many statements one attempt sends at most: creating or resizing the
/// name's rows that keep changing under it (an operator deleting them,
/// clients flipping the limit), or queueing for a busy name row, before it
/// counts as blocked.
const PREPARE_ROUNDS: usize = 3;

/// The semaphore adapter of a `version_cas` client.
#[derive(Debug)]
pub(crate) struct PgSemaphore {
    pub table: Arc<Table>,
}

/// One won slot.
#[derive(Debug)]
struct Taken {
    slot: u32,
    token: FencingToken,
    sent_at: Instant,
}

#[async_trait]
impl SemaphoreBackend for PgSemaphore {
    type Permit = RowShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<RowShare>, LockError> {
        let table = &self.table;
        let name = req.acquire.key.as_str().to_owned();
        let payload = semaphore_payload(&table.namespace, &name);
        let owner = random_owner();
        let mut attempts = PermitAttempts {
            table,
            req,
            name: &name,
            owner: &owner,
            payload: &payload,
        };
        let taken = wait_for(table, &req.acquire, &payload, MAX_PAUSE, &mut attempts).await?;
        Ok(AcquiredPermit {
            acquired: Acquired {
                handle: RowShare {
                    table: table.clone(),
                    kind: ShareKind::Permit,
                    name,
                    owner,
                    payload,
                },
                token: taken.token,
                sent_at: taken.sent_at,
            },
            slot: taken.slot,
        })
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

struct PermitAttempts<'a> {
    table: &'a Arc<Table>,
    req: PermitRequest<'a>,
    name: &'a str,
    owner: &'a str,
    payload: &'a str,
}

#[async_trait]
impl Attempts for PermitAttempts<'_> {
    type Won = Taken;

    /// One attempt on a pooled connection. Once a statement is sent its
    /// outcome is unknown until the reply: dropped or failed midway, the
    /// attempt ends the cut-off session and frees whatever this owner won, in
    /// the background (see [`undo`]).
    async fn attempt(&mut self) -> Result<Step<Taken>, DbError> {
        let table = self.table;
        let mut conn = table.pool.get().await?;
        let state = Undo {
            table: table.clone(),
            in_flight: Some(conn.session()),
            make: Some(release_statement(
                table.clone(),
                ShareKind::Permit,
                self.name.to_owned(),
                self.owner.to_owned(),
                self.payload.to_owned(),
            )),
        };
        let mut guard = CancelGuard::new(state, undo);
        let step = self.take(&mut conn).await;
        if step.as_ref().err().is_none_or(DbError::answered)
            && let Some(state) = guard.state_mut()
        {
            state.in_flight = None;
        }
        let step = step?;
        // Won: the permit's handle owns the slot from here on. Otherwise
        // nothing was won.
        guard.disarm();
        Ok(step)
    }
}

impl PermitAttempts<'_> {
    /// The acquire statement, creating the name's rows or moving to this
    /// client's limit first when it asks for that.
    async fn take(&self, conn: &mut Conn) -> Result<Step<Taken>, DbError> {
        let (t, limit) = (self.table, self.req.limit);
        let limit_arg = i32::try_from(limit)
            .map_err(|_| DbError::Protocol(format!("limit {limit} out of range")))?;
        let ttl = micros(self.req.acquire.ttl);
        let mut statement = &t.sql.sem.acquire;
        for _ in 0..PREPARE_ROUNDS {
            let sent_at = Instant::now();
            let acquire = sqlx::query(statement.clone())
                .bind(t.namespace.clone())
                .bind(self.name.to_owned())
                .bind(limit_arg)
                .bind(self.owner.to_owned())
                .bind(ttl);
            let row = conn.fetch_one(acquire).await?;
            let in_use: Option<i32> = row.try_get(0).map_err(DbError::Sql)?;
            let slot: Option<i32> = row.try_get(1).map_err(DbError::Sql)?;
            let token: Option<i64> = row.try_get(2).map_err(DbError::Sql)?;
            let remaining: Option<i64> = row.try_get(3).map_err(DbError::Sql)?;
            let looked_free: Option<bool> = row.try_get(4).map_err(DbError::Sql)?;
            match (in_use, slot, token) {
                (_, Some(slot), Some(token)) => {
                    let (Ok(slot), Ok(token)) = (u32::try_from(slot), u64::try_from(token)) else {
                        return Err(DbError::Protocol(format!(
                            "the semaphore gave slot {slot} with token {token}"
                        )));
                    };
                    return Ok(Step::Won(Taken {
                        slot,
                        token: FencingToken::new(token),
                        sent_at,
                    }));
                }
                (Some(in_use), _, _) if in_use != limit_arg => {
                    let resize = sqlx::query(t.sql.sem.resize.clone())
                        .bind(t.namespace.clone())
                        .bind(self.name.to_owned())
                        .bind(limit_arg);
                    let row = conn.fetch_one(resize).await?;
                    let before: Option<i32> = row.try_get(0).map_err(DbError::Sql)?;
                    let live: Option<i64> = row.try_get(1).map_err(DbError::Sql)?;
                    if let (Some(before), Some(1..)) = (before, live)
                        && before != limit_arg
                    {
                        let existing = u32::try_from(before).unwrap_or(0);
                        return Ok(Step::Refused(self.req.mismatch(existing)));
                    }
                }
                // A slot looked free but another acquire held the name's
                // row: queue for the row this time, so the next free slot
                // is taken as soon as that acquire commits.
                (Some(_), _, _) if looked_free == Some(true) && remaining.is_some() => {
                    statement = &t.sql.sem.acquire_waiting;
                }
                (Some(_), _, _) if remaining.is_some() => {
                    let remaining = remaining.unwrap_or(0).max(0).unsigned_abs();
                    return Ok(Step::Blocked {
                        remaining: Duration::from_micros(remaining),
                    });
                }
                // No row yet; or no slot taken although no permit is live:
                // an operator deleted slot rows, or the free ones all went to
                // others since this statement's snapshot. Both are settled by
                // creating whatever slot rows are missing and trying again.
                _ => {
                    let create = sqlx::query(t.sql.sem.create.clone())
                        .bind(t.namespace.clone())
                        .bind(self.name.to_owned())
                        .bind(limit_arg);
                    conn.execute(create).await?;
                }
            }
        }
        Ok(Step::Blocked {
            remaining: Duration::ZERO,
        })
    }
}

#[async_trait]
impl SemaphoreInspect for PgSemaphore {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let t = &self.table;
        let read = sqlx::query(t.sql.sem.permits.clone())
            .bind(t.namespace.clone())
            .bind(key.as_str().to_owned());
        let rows = t.pool.fetch_all(read).await?;
        rows.iter()
            .map(|row| {
                let (slot, token, holder) =
                    decode::<(i32, i64, String)>(row).map_err(|e| t.error(e))?;
                match (u32::try_from(slot), u64::try_from(token)) {
                    (Ok(slot), Ok(token)) => {
                        Ok(PermitInfo::new(slot, FencingToken::new(token), holder))
                    }
                    _ => Err(t.error(DbError::Protocol(format!(
                        "permit row with slot {slot} and token {token}"
                    )))),
                }
            })
            .collect()
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        let t = &self.table;
        let Ok(slot) = i32::try_from(slot) else {
            return Ok(false);
        };
        let name = key.as_str();
        let delete = sqlx::query(t.sql.sem.delete.clone())
            .bind(t.namespace.clone())
            .bind(name.to_owned())
            .bind(slot)
            .bind(t.sql.channel.clone())
            .bind(semaphore_payload(&t.namespace, name));
        Ok(t.count_rows(delete).await.map_err(|e| t.error(e))? > 0)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let t = &self.table;
        let read = sqlx::query(t.sql.sem.residue.clone())
            .bind(t.namespace.clone())
            .bind(prefix.to_owned());
        let rows = t.pool.fetch_all(read).await?;
        rows.iter()
            .map(|row| {
                let (name, slot) = decode::<(String, i32)>(row).map_err(|e| t.error(e))?;
                Ok(format!("permit {name} slot {slot}"))
            })
            .collect()
    }
}
