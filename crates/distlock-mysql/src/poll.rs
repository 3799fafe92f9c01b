//! Waiting by polling, for `version_cas` and `unique_insert`: one attempt, then
//! a jittered exponential backoff capped at 250 ms and bounded by the holder's
//! remaining ttl, until the lock is won or the wait ends. An attempt refused for
//! row-lock contention (1205, 1213) is undone and tried again the same way.

use crate::backend::{MakeStatement, Table, Undo, micros, retry_until, undo};
use crate::error::{BACKEND, DbError};
use crate::keys::row_name;
use crate::pool::Conn;
use crate::protocol::HELD_FLAG;
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, Inspect, random_owner};
use distlock_core::{Capabilities, FencingToken, LockError};
use sqlx::SqlStr;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first pause after a failed attempt.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a released lock is seen within this (plus one round trip).
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The lock is ours; `sent_at` was taken before the statement that won it.
    Won { token: u64, sent_at: Instant },
    /// Someone holds it for about `remaining` more (by the server clock).
    Held { remaining: Duration },
}

/// What a lock held by a polling strategy keeps: its row, the owner value the
/// compare-owner statements check, and the token.
#[derive(Debug)]
pub(crate) struct RowHandle {
    pub row: Vec<u8>,
    pub owner: String,
    pub fence: u64,
}

/// What one attempt binds.
#[derive(Debug)]
pub(crate) struct Bid {
    pub row: Vec<u8>,
    /// Fresh per attempt: compare-owner statements never match another
    /// acquisition's row, and the background undo of a failed attempt never
    /// matches the row a later attempt of the same acquisition won.
    pub owner: String,
    /// The ttl in microseconds.
    pub ttl: u64,
    /// Until when statements refused for row-lock contention are retried within
    /// the attempt.
    pub until: WaitUntil,
}

/// What one attempt works with.
pub(crate) struct Round<'a> {
    pub table: &'a Table,
    pub bid: &'a Bid,
    pub conn: &'a mut Conn,
}

/// One contender's attempts on the lock, as the strategy defines them.
#[async_trait]
pub(crate) trait Contender: Send {
    /// One attempt on the round's connection.
    async fn attempt(&mut self, round: Round<'_>) -> Result<Attempt, DbError>;
}

/// A reply that says the row is held, with the holder's remaining µs below
/// [`HELD_FLAG`].
pub(crate) fn held_for(reply: u64) -> Attempt {
    Attempt::Held {
        remaining: Duration::from_micros(reply & !HELD_FLAG),
    }
}

/// A polling strategy's backend: `S` makes its attempts.
pub(crate) struct Polling<S> {
    pub table: Arc<Table>,
    strategy: PhantomData<fn() -> S>,
}

impl<S> Polling<S> {
    pub fn new(table: Arc<Table>) -> Self {
        Polling {
            table,
            strategy: PhantomData,
        }
    }
}

impl<S> std::fmt::Debug for Polling<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polling")
            .field("strategy", &self.table.strategy)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<S: Contender + Default + 'static> Backend for Polling<S> {
    type Handle = RowHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        self.table.strategy.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RowHandle>, LockError> {
        let ([undo, _, _], _) = self.table.sql.polling(self.table.strategy);
        acquire_polling(&self.table, &req, undo, S::default()).await
    }

    async fn renew(&self, handle: &RowHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let ([_, renew, _], with_fence) = self.table.sql.polling(self.table.strategy);
        compare_row(&self.table, renew, Some(ttl), handle, with_fence).await
    }

    async fn release(&self, handle: &RowHandle) -> Result<Ownership, LockError> {
        let ([_, _, release], with_fence) = self.table.sql.polling(self.table.strategy);
        compare_row(&self.table, release, None, handle, with_fence).await
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(&*self.table)
    }
}

/// Attempts until won, `Busy` for `WaitUntil::No`, or `Timeout` at the deadline.
///
/// Once an attempt's statement is sent, its outcome is unknown until the reply:
/// an attempt dropped (deadline, cancelled future) or failed midway runs
/// `release`, a compare-owner statement bound to `(row, owner)`, in the
/// background. A dropped attempt also closes its connection, which may still
/// carry the reply, and its undo waits until the server ended that session (see
/// [`undo`]): run before the cut-off statement, the release would match nothing.
pub(crate) async fn acquire_polling(
    table: &Arc<Table>,
    req: &AcquireRequest<'_>,
    release: &SqlStr,
    mut contender: impl Contender,
) -> Result<Acquired<RowHandle>, LockError> {
    let no_wait = req.wait == WaitUntil::No;
    let until = retry_until(req);
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    let row = row_name(req.key);
    loop {
        let bid = Bid {
            row: row.clone(),
            owner: random_owner(),
            ttl: micros(req.ttl),
            until,
        };
        let one_try = async {
            let mut conn = table.pool.get().await?;
            let (release, row, owner) = (release.clone(), bid.row.clone(), bid.owner.clone());
            let make: MakeStatement = Box::new(move || {
                sqlx::query(release.clone())
                    .bind(row.clone())
                    .bind(owner.clone())
            });
            let state = Undo {
                table: table.clone(),
                in_flight: Some(conn.session().id),
                make,
            };
            let mut guard = CancelGuard::new(state, undo);
            let round = Round {
                table,
                bid: &bid,
                conn: &mut conn,
            };
            let attempt = contender.attempt(round).await;
            // Answered: nothing of this attempt still runs on the server (and a
            // connection that answered an error may be back in the pool, so it
            // must not be killed).
            if attempt.as_ref().err().is_none_or(DbError::answered)
                && let Some(state) = guard.state_mut()
            {
                state.in_flight = None;
            }
            let attempt = attempt?;
            // Won: the handle owns the row from here on. Held: nothing was won.
            guard.disarm();
            Ok::<_, DbError>(attempt)
        };
        let outcome = tokio::select! {
            biased;
            outcome = one_try => outcome,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        let outcome = match outcome {
            // Refused for row-lock contention: rolled back, and anything the
            // attempt won is being undone. Try again within the wait.
            Err(e) if e.lost_to_contention() => {
                if !backoff.pause(MAX_PAUSE, until).await {
                    return Err(req.not_acquired());
                }
                continue;
            }
            other => other.map_err(|e| table.error(e))?,
        };
        match outcome {
            Attempt::Won { token, sent_at } => {
                return Ok(Acquired {
                    handle: RowHandle {
                        row: bid.row,
                        owner: bid.owner,
                        fence: token,
                    },
                    token: FencingToken::new(token),
                    sent_at,
                });
            }
            Attempt::Held { remaining } => {
                // Never sleep past the holder's expiry: a crashed holder is taken
                // over as soon as the server lets us.
                let bound = remaining + Duration::from_millis(1);
                if no_wait || !backoff.pause(bound, req.wait).await {
                    return Err(req.not_acquired());
                }
            }
        }
    }
}

/// Renews (with `ttl`) or releases a polled lock by a compare-owner statement,
/// `sql`, which binds `[ttl µs,] row, owner [, fence]`: one matched row means it
/// was still ours.
pub(crate) async fn compare_row(
    table: &Table,
    sql: &SqlStr,
    ttl: Option<Duration>,
    handle: &RowHandle,
    with_fence: bool,
) -> Result<Ownership, LockError> {
    let statement = || {
        let mut statement = sqlx::query(sql.clone());
        if let Some(ttl) = ttl {
            statement = statement.bind(micros(ttl));
        }
        statement = statement
            .bind(handle.row.clone())
            .bind(handle.owner.clone());
        if with_fence {
            statement = statement.bind(handle.fence);
        }
        statement
    };
    table.compare_owner(statement).await
}
