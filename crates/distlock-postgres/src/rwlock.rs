//! The read-write lock (`version_cas` tables only): one row per name in
//! `<table>_rwlocks` (the ticket counter) and one row per request, waiting or
//! granted, in `<table>_shares`, keyed by its ticket.
//!
//! A request first queues a row with a fresh ticket (the counter raised in
//! the same statement; the name's row lock orders the tickets, so every
//! smaller ticket's row was committed before ours). Then a grant statement,
//! whose snapshot therefore sees every row ahead, grants it when nothing it
//! must wait for is ahead: for a writer any live row, for a reader any live
//! writer's row, waiting or granted. So requests are served in ticket order,
//! a waiting writer holds back later readers, and a write token (its ticket)
//! is above every earlier share's.
//!
//! Every row expires by the server clock (a waiter refreshes its row on each
//! attempt, at least every ttl/3). An expired row ahead counts as gone only
//! when this very statement deleted it, so the delete re-checks the row's
//! newest version: a row refreshed meanwhile stays, and blocks.

use crate::backend::{Table, Undo, micros, undo};
use crate::error::{BACKEND, DbError};
use crate::inspect::decode;
use crate::keys::rwlock_payload;
use crate::pool::Conn;
use crate::row_share::{RowShare, ShareKind, release_statement};
use crate::session::Session;
use crate::waiting::{Attempts, MAX_PAUSE, Step, wait_for};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, RwLockBackend, RwLockInspect, ShareInfo};
use distlock_core::toolkit::{CancelGuard, UndoFuture, random_owner};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey, RwMode};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The read-write lock adapter of a `version_cas` client.
#[derive(Debug)]
pub(crate) struct PgRwLock {
    pub table: Arc<Table>,
}

#[async_trait]
impl RwLockBackend for PgRwLock {
    type Share = RowShare;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire_read(&self, req: AcquireRequest<'_>) -> Result<Acquired<RowShare>, LockError> {
        self.acquire(req, RwMode::Read).await
    }

    async fn acquire_write(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired<RowShare>, LockError> {
        self.acquire(req, RwMode::Write).await
    }

    fn inspect(&self) -> Option<&dyn RwLockInspect> {
        Some(self)
    }
}

type Guard = CancelGuard<Undo, fn(Undo) -> Option<UndoFuture>>;

impl PgRwLock {
    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<RowShare>, LockError> {
        let table = &self.table;
        let name = req.key.as_str().to_owned();
        let payload = rwlock_payload(&table.namespace, &name);
        let owner = random_owner();
        // Armed before the row is queued: whenever the acquire ends without a
        // share (cancelled, timed out, failed), the row is deleted.
        let undo: fn(Undo) -> Option<UndoFuture> = undo;
        let guard = CancelGuard::new(
            Undo {
                table: table.clone(),
                in_flight: None,
                make: Some(release_statement(
                    table.clone(),
                    ShareKind::RwShare,
                    name.clone(),
                    owner.clone(),
                    payload.clone(),
                )),
            },
            undo,
        );
        let mut attempts = ShareAttempts {
            table,
            name: &name,
            owner: &owner,
            mode,
            ttl: req.ttl,
            ticket: None,
            guard: Some(guard),
        };
        // The row must be refreshed well within its ttl while waiting.
        let max_pause = MAX_PAUSE.min(req.ttl / 3);
        let (token, sent_at) = wait_for(table, &req, &payload, max_pause, &mut attempts).await?;
        if let Some(guard) = attempts.guard.take() {
            guard.disarm();
        }
        Ok(Acquired {
            handle: RowShare {
                table: table.clone(),
                kind: ShareKind::RwShare,
                name,
                owner,
                payload,
            },
            token,
            sent_at,
        })
    }
}

struct ShareAttempts<'a> {
    table: &'a Arc<Table>,
    name: &'a str,
    owner: &'a str,
    mode: RwMode,
    ttl: Duration,
    /// The queued row's ticket, once queued.
    ticket: Option<i64>,
    /// Deletes the row unless the acquire wins (then taken and disarmed).
    guard: Option<Guard>,
}

#[async_trait]
impl Attempts for ShareAttempts<'_> {
    type Won = (FencingToken, Instant);

    async fn attempt(&mut self) -> Result<Step<Self::Won>, DbError> {
        let mut conn = self.table.pool.get().await?;
        self.set_in_flight(Some(conn.session()));
        let step = self.step(&mut conn).await;
        // Answered: nothing of this attempt still runs on the server.
        if step.as_ref().err().is_none_or(DbError::answered) {
            self.set_in_flight(None);
        }
        step
    }
}

impl ShareAttempts<'_> {
    fn set_in_flight(&mut self, session: Option<Session>) {
        if let Some(state) = self.guard.as_mut().and_then(CancelGuard::state_mut) {
            state.in_flight = session;
        }
    }

    /// Queues the row when it has none, then tries to have it granted.
    async fn step(&mut self, conn: &mut Conn) -> Result<Step<(FencingToken, Instant)>, DbError> {
        let t = self.table;
        let ttl = micros(self.ttl);
        let ticket = match self.ticket {
            Some(ticket) => ticket,
            None => {
                let enter = sqlx::query(t.sql.rw.enter.clone())
                    .bind(t.namespace.clone())
                    .bind(self.name.to_owned())
                    .bind(self.mode.to_string())
                    .bind(self.owner.to_owned())
                    .bind(ttl);
                let row = conn.fetch_one(enter).await?;
                let ticket: i64 = row.try_get(0).map_err(DbError::Sql)?;
                self.ticket = Some(ticket);
                ticket
            }
        };
        let sent_at = Instant::now();
        let grant = sqlx::query(t.sql.rw.grant.clone())
            .bind(t.namespace.clone())
            .bind(self.name.to_owned())
            .bind(ticket)
            .bind(self.owner.to_owned())
            .bind(ttl)
            .bind(self.mode == RwMode::Write);
        let row = conn.fetch_one(grant).await?;
        let granted: Option<bool> = row.try_get(0).map_err(DbError::Sql)?;
        let remaining: Option<i64> = row.try_get(1).map_err(DbError::Sql)?;
        match granted {
            Some(true) => {
                let token = u64::try_from(ticket).map_err(|_| {
                    DbError::Protocol(format!("the read-write lock gave ticket {ticket}"))
                })?;
                Ok(Step::Won((FencingToken::new(token), sent_at)))
            }
            Some(false) => Ok(Step::Blocked {
                remaining: Duration::from_micros(remaining.unwrap_or(0).max(0).unsigned_abs()),
            }),
            // Our row expired and was deleted by someone behind it (this
            // client stalled past its ttl): queue again, at the back.
            None => {
                self.ticket = None;
                Ok(Step::Blocked {
                    remaining: Duration::ZERO,
                })
            }
        }
    }
}

#[async_trait]
impl RwLockInspect for PgRwLock {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let t = &self.table;
        let read = sqlx::query(t.sql.rw.shares.clone())
            .bind(t.namespace.clone())
            .bind(key.as_str().to_owned());
        let rows = t.pool.fetch_all(read).await?;
        rows.iter()
            .map(|row| {
                let (mode, ticket, holder) =
                    decode::<(String, i64, String)>(row).map_err(|e| t.error(e))?;
                let mode = match mode.as_str() {
                    "write" => RwMode::Write,
                    _ => RwMode::Read,
                };
                let token = u64::try_from(ticket).map_err(|_| {
                    t.error(DbError::Protocol(format!("share row with ticket {ticket}")))
                })?;
                Ok(ShareInfo::new(mode, FencingToken::new(token), holder))
            })
            .collect()
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        let t = &self.table;
        let name = key.as_str();
        let delete = sqlx::query(t.sql.rw.delete.clone())
            .bind(t.namespace.clone())
            .bind(name.to_owned())
            .bind(t.sql.channel.clone())
            .bind(rwlock_payload(&t.namespace, name));
        let rows = t.pool.fetch_all(delete).await?;
        let deleted = match rows.first() {
            Some(row) => {
                decode::<(i64, Option<String>)>(row)
                    .map_err(|e| t.error(e))?
                    .0
            }
            None => 0,
        };
        Ok(usize::try_from(deleted).unwrap_or(0))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let t = &self.table;
        let read = sqlx::query(t.sql.rw.residue.clone())
            .bind(t.namespace.clone())
            .bind(prefix.to_owned());
        let rows = t.pool.fetch_all(read).await?;
        rows.iter()
            .map(|row| {
                let (name, ticket, mode, granted) =
                    decode::<(String, i64, String, bool)>(row).map_err(|e| t.error(e))?;
                let state = if granted { "held" } else { "waiting" };
                Ok(format!("{mode} share {name} ticket {ticket} ({state})"))
            })
            .collect()
    }
}
