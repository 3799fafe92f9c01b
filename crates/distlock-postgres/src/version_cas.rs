//! `version_cas`: the row persists and its `fence` column is the version.
//!
//! Invariant: only the CAS `UPDATE` sets `owner`, and it raises `fence` in the
//! same statement (`RETURNING fence` hands the token back in the same round
//! trip), so every holder's token exceeds every earlier holder's. Release
//! clears `owner` but keeps the row, so the fence never resets, and notifies
//! the table's channel in the same statement. A cycle is two statements: the
//! CAS and the release (the row insert runs only when the CAS found no row).
//!
//! Waiting: `waiting.rs`, each attempt with an owner value of its own.

use crate::backend::{MakeStatement, Table, Undo, micros, undo};
use crate::error::{BACKEND, DbError};
use crate::pool::Conn;
use crate::waiting::{Attempts, Step, wait_for};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership};
use distlock_core::toolkit::{CancelGuard, Inspect, random_owner};
use distlock_core::{Capabilities, FencingToken, LockError};
use sqlx::Row;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often one attempt re-inserts a row that keeps vanishing (an operator
/// deleting it in a loop) before it reports the lock as busy.
const ROW_INSERTS: usize = 3;
/// A `version_cas` client's backend.
#[derive(Debug)]
pub(crate) struct VersionCas {
    pub table: Arc<Table>,
}

/// What a held lock keeps: its name, the owner value the compare-owner
/// statements check, and the token.
#[derive(Debug)]
pub(crate) struct RowHandle {
    pub name: String,
    pub owner: String,
    pub fence: i64,
    pub payload: String,
}

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The lock is ours; `sent_at` was taken before the statement that won it.
    Won { token: i64, sent_at: Instant },
    /// Someone holds it for about `remaining` more (by the server clock).
    Held { remaining: Duration },
}

#[async_trait]
impl Backend for VersionCas {
    type Handle = RowHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RowHandle>, LockError> {
        let table = &self.table;
        let payload = table.payload(req.key);
        let name = req.key.as_str().to_owned();
        let mut tries = Tries {
            backend: self,
            name: &name,
            payload: &payload,
            ttl: req.ttl,
        };
        let (owner, token, sent_at) = wait_for(table, &req, &payload, &mut tries).await?;
        let fence = u64::try_from(token).map_err(|_| {
            table.error(DbError::Protocol(format!("the CAS returned token {token}")))
        })?;
        Ok(Acquired {
            handle: RowHandle {
                name,
                owner,
                fence: token,
                payload,
            },
            token: FencingToken::new(fence),
            sent_at,
        })
    }

    async fn renew(&self, handle: &RowHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let t = &self.table;
        let renew = sqlx::query(t.sql.cas_renew.clone())
            .bind(t.namespace.clone())
            .bind(handle.name.clone())
            .bind(handle.owner.clone())
            .bind(handle.fence)
            .bind(micros(ttl));
        match t.run(renew).await.map_err(|e| t.error(e))? {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }

    async fn release(&self, handle: &RowHandle) -> Result<Ownership, LockError> {
        let t = &self.table;
        let release = sqlx::query(t.sql.cas_release.clone())
            .bind(t.namespace.clone())
            .bind(handle.name.clone())
            .bind(handle.owner.clone())
            .bind(handle.fence)
            .bind(t.sql.channel.clone())
            .bind(handle.payload.clone());
        match t.count_rows(release).await.map_err(|e| t.error(e))? {
            0 => Ok(Ownership::NotHeld),
            _ => Ok(Ownership::Held),
        }
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(&*self.table)
    }
}

/// The attempts of one acquire, each with an owner value of its own.
struct Tries<'a> {
    backend: &'a VersionCas,
    name: &'a str,
    payload: &'a str,
    ttl: Duration,
}

#[async_trait]
impl Attempts for Tries<'_> {
    /// The owner value, the token and when the winning statement was sent.
    type Won = (String, i64, Instant);

    async fn attempt(&mut self) -> Result<Step<Self::Won>, DbError> {
        let owner = random_owner();
        let one_try = self
            .backend
            .one_try(self.name, &owner, self.payload, self.ttl);
        Ok(match one_try.await? {
            Attempt::Won { token, sent_at } => Step::Won((owner, token, sent_at)),
            Attempt::Held { remaining } => Step::Blocked { remaining },
        })
    }
}

impl VersionCas {
    /// One attempt on a pooled connection. Once its statement is sent, its
    /// outcome is unknown until the reply: dropped (deadline, cancelled future)
    /// or failed midway, it ends the cut-off session and runs the owner-checked
    /// abandon statement in the background (see [`undo`]).
    async fn one_try(
        &self,
        name: &str,
        owner: &str,
        payload: &str,
        ttl: Duration,
    ) -> Result<Attempt, DbError> {
        let table = &self.table;
        let mut conn = table.pool.get().await?;
        let abandon = {
            let (t, name, owner, payload) = (
                table.clone(),
                name.to_owned(),
                owner.to_owned(),
                payload.to_owned(),
            );
            Box::new(move || {
                sqlx::query(t.sql.cas_abandon.clone())
                    .bind(t.namespace.clone())
                    .bind(name.clone())
                    .bind(owner.clone())
                    .bind(t.sql.channel.clone())
                    .bind(payload.clone())
            }) as MakeStatement
        };
        let state = Undo {
            table: table.clone(),
            in_flight: Some(conn.session()),
            make: Some(abandon),
        };
        let mut guard = CancelGuard::new(state, undo);
        let attempt = cas(table, name, owner, micros(ttl), &mut conn).await;
        // Answered: nothing of this attempt still runs on the server (and a
        // connection that answered an error may be back in the pool, so it
        // must not be terminated).
        if attempt.as_ref().err().is_none_or(DbError::answered)
            && let Some(state) = guard.state_mut()
        {
            state.in_flight = None;
        }
        let attempt = attempt?;
        // Won: the handle owns the row from here on. Held: nothing was won.
        guard.disarm();
        Ok(attempt)
    }
}

/// The CAS, inserting the row first when it has none.
pub(crate) async fn cas(
    table: &Table,
    name: &str,
    owner: &str,
    ttl_micros: i64,
    conn: &mut Conn,
) -> Result<Attempt, DbError> {
    for _ in 0..ROW_INSERTS {
        let sent_at = Instant::now();
        let cas = sqlx::query(table.sql.cas_acquire.clone())
            .bind(table.namespace.clone())
            .bind(name.to_owned())
            .bind(owner.to_owned())
            .bind(ttl_micros);
        let row = conn.fetch_one(cas).await?;
        let token: Option<i64> = row.try_get(0).map_err(DbError::Sql)?;
        let remaining: Option<i64> = row.try_get(1).map_err(DbError::Sql)?;
        match (token, remaining) {
            (Some(token), _) => return Ok(Attempt::Won { token, sent_at }),
            (None, Some(remaining)) => {
                return Ok(Attempt::Held {
                    remaining: Duration::from_micros(remaining.max(0).unsigned_abs()),
                });
            }
            (None, None) => {
                // No row yet: create it (fence seeded from the server clock) and CAS again.
                let insert = sqlx::query(table.sql.cas_insert_row.clone())
                    .bind(table.namespace.clone())
                    .bind(name.to_owned());
                conn.execute(insert).await?;
            }
        }
    }
    Ok(Attempt::Held {
        remaining: Duration::ZERO,
    })
}
