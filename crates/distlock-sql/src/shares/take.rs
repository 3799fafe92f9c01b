//! Taking a share (see the parent module for the layout and its invariants):
//! one transaction per attempt that locks the name's head row, reads every
//! row of the name and takes a share, marks its place or takes nothing, as
//! the primitive's [`Taker`] plans; between attempts a jittered poll, cut
//! short by a release's wake-up where the adapter has them.

use super::{HEAD_SLOT, Plan, ShareAdapter, ShareDb, ShareHandle, ShareRow, Shares, Taker};
use crate::db_error::DbError;
use crate::poll::{FIRST_PAUSE, MAX_PAUSE, woken};
use crate::pool::Conn;
use crate::settle::retry_until;
use crate::table::{Db, TableDb, Undo, Value, micros, statement, undo};
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, UndoFuture, random_owner};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tokens stay below this (PostgreSQL's `BIGINT`; MySQL's insert id flags).
const TOKEN_LIMIT: u64 = 1 << 63;

/// Undoes an acquire given up on: deletes its owner's rows (after the
/// cut-off session ended, if one was: an undo that overtook its statement
/// would match nothing while the statement then commits a row for nobody).
type ShareGuard<A> = CancelGuard<Undo<A>, fn(Undo<A>) -> Option<UndoFuture>>;

/// The outcome of one attempt.
enum Attempt {
    Won {
        token: u64,
        slot: u32,
        sent_at: Instant,
    },
    /// No room; `marked` when the attempt committed a mark.
    Wait {
        remaining: Duration,
        marked: bool,
    },
    Refuse(LockError),
}

impl<A: ShareAdapter> Shares<A> {
    /// Takes a share of `req.key` as `taker` decides, waiting per `req.wait`.
    /// Returns the handle and its slot. Cancel-safe: an attempt cut off after
    /// its first statement deletes, in the background, whatever rows its
    /// owner may have committed (after the cut-off session ended).
    pub async fn take(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        taker: &dyn Taker,
    ) -> Result<(Acquired<ShareHandle<A>>, u32), LockError> {
        let no_wait = req.wait == WaitUntil::No;
        let until = retry_until(req);
        let key = self.base.key(req.key);
        // One owner for the whole acquire: a waiter's place, committed by one
        // attempt, is recognised as its own by the next.
        let owner: Arc<str> = random_owner().into();
        let waiter = self.base.waiter(req.key, Some(self.primitive));
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        let mut marked = false;
        // After an attempt found no room, the next ones look without locks first.
        let mut peek = false;
        let mut mine = key.clone();
        mine.push(Value::Text(owner.clone()));
        let drop_mine = self.drop_owner.clone();
        // Armed for the whole acquire: a committed place is undone on any exit
        // but a win.
        let undo: fn(Undo<A>) -> Option<UndoFuture> = undo;
        let mut guard: ShareGuard<A> = CancelGuard::new(
            Undo {
                table: self.base.clone(),
                in_flight: None,
                make: Some(Box::new(move || statement(&drop_mine, &mine))),
            },
            undo,
        );
        loop {
            // Armed before the attempt: a release between the attempt's reply
            // and the pause below still wakes it.
            let mut notified = waiter.as_deref().map(|notify| Box::pin(notify.notified()));
            if let Some(notified) = notified.as_mut() {
                notified.as_mut().enable();
            }
            let bid = Bid {
                key: &key,
                owner: &owner,
                peek,
            };
            let one_try = async {
                let mut conn = Db::<A>::connection(self.base.pool()).await?;
                if let Some(state) = guard.state_mut() {
                    state.in_flight = Some(conn.session());
                }
                let attempt = self.attempt(req, &bid, taker, &mut conn).await;
                // Answered: nothing of this attempt still runs on the server.
                if attempt.as_ref().err().is_none_or(DbError::answered)
                    && let Some(state) = guard.state_mut()
                {
                    state.in_flight = None;
                }
                attempt
            };
            let outcome = tokio::select! {
                biased;
                outcome = one_try => outcome,
                _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
            };
            let (remaining, now) = match outcome {
                Ok(Attempt::Won {
                    token,
                    slot,
                    sent_at,
                }) => {
                    guard.disarm();
                    let handle = ShareHandle {
                        shares: self.clone(),
                        key,
                        owner,
                        fence: token,
                    };
                    let token = FencingToken::new(token);
                    let acquired = Acquired {
                        handle,
                        token,
                        sent_at,
                    };
                    return Ok((acquired, slot));
                }
                Ok(Attempt::Refuse(e)) => return Err(nothing_left(guard, marked, e)),
                Ok(Attempt::Wait { remaining, marked }) => (remaining, marked),
                Err(e) if e.lost_to_contention() => {
                    if !backoff.pause(MAX_PAUSE, until).await {
                        return Err(nothing_left(guard, marked, req.not_acquired()));
                    }
                    continue;
                }
                Err(e) => return Err(self.error(e)),
            };
            marked |= now;
            peek = true;
            // Never sleep past the earliest expiry: a crashed holder's share
            // is taken over as soon as the server lets us.
            let bound = remaining + Duration::from_millis(1);
            if no_wait {
                return Err(nothing_left(guard, marked, req.not_acquired()));
            }
            tokio::select! {
                () = woken(notified.as_mut().map(|n| n.as_mut())) => backoff.reset(),
                more = backoff.pause(bound, req.wait) => if !more {
                    return Err(nothing_left(guard, marked, req.not_acquired()));
                },
            }
        }
    }
}

/// Gives up with `e`. The undo (deleting this acquire's rows) runs only when
/// something of it may be on the server: a committed mark, or an attempt
/// whose reply never came; an acquire that only ever read leaves nothing.
fn nothing_left<A: ShareAdapter>(
    mut guard: ShareGuard<A>,
    marked: bool,
    e: LockError,
) -> LockError {
    let in_flight = guard
        .state_mut()
        .is_some_and(|state| state.in_flight.is_some());
    if !marked && !in_flight {
        guard.disarm();
    }
    e
}

/// What one attempt is for.
struct Bid<'a> {
    key: &'a [Value],
    owner: &'a Arc<str>,
    /// Look without locks first.
    peek: bool,
}

impl Bid<'_> {
    /// The key's values followed by `more`.
    fn with(&self, more: impl IntoIterator<Item = Value>) -> Vec<Value> {
        let mut values = self.key.to_vec();
        values.extend(more);
        values
    }
}

impl<A: ShareAdapter> Shares<A> {
    /// One transaction: raise the head (locking it), read the rows, and take a
    /// share, mark its place, or take nothing, as `taker` plans.
    ///
    /// With `bid.peek`, a read without locks comes first: while nothing can be
    /// taken (the usual poll of a full semaphore or a blocked reader) the
    /// attempt is that one statement, and waiters do not queue on the head
    /// row. Only the locked read decides a grant.
    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        bid: &Bid<'_>,
        taker: &dyn Taker,
        conn: &mut Conn<A::Dialect>,
    ) -> Result<Attempt, DbError> {
        let owner = bid.owner;
        let query = |sql, values: &[Value]| statement::<Db<A>>(sql, values);
        if bid.peek {
            let rows = Db::<A>::share_rows(conn, query(&self.peek, &bid.with([]))).await?;
            if let Plan::Wait {
                remaining,
                mark: None,
            } = taker.plan(&rows, owner.as_bytes())
            {
                let marked = false;
                return Ok(Attempt::Wait { remaining, marked });
            }
        }
        let limit = self.base.pool().timeout();
        conn.may_hold();
        Db::<A>::text(conn, Db::<A>::BEGIN, limit).await?;
        let permits = Value::MaybeInt(taker.permits().map(u64::from));
        let mut bump_values = vec![Value::Int(micros(req.ttl))];
        bump_values.extend_from_slice(bid.key);
        let bump = || query(&self.bump_head, &bump_values);
        let mut token = Db::<A>::bump(conn, bump()).await?;
        if token == 0 {
            // The name's first share since its head was collected (or ever):
            // create the head above the namespace's floor, then raise it.
            let insert = |floor| query(&self.insert_head, &bid.with([permits, Value::Int(floor)]));
            let base = self.base.as_ref();
            self.collector.create_within(base, conn, insert).await?;
            token = Db::<A>::bump(conn, bump()).await?;
        }
        if token == 0 || token >= TOKEN_LIMIT {
            return Err(DbError::Protocol(format!(
                "the share counter returned {token}"
            )));
        }
        let rows: Vec<ShareRow> =
            Db::<A>::share_rows(conn, query(&self.rows, &bid.with([]))).await?;
        let write = |slot: u32, fence: u64, ttl: Duration| {
            let values = [
                Value::Int(slot.into()),
                Value::Text(owner.clone()),
                Value::Int(fence),
                Value::Int(micros(ttl)),
            ];
            query(&self.take, &bid.with(values))
        };
        let (outcome, end) = match taker.plan(&rows, owner.as_bytes()) {
            Plan::Refuse(e) => (Attempt::Refuse(e), "ROLLBACK"),
            Plan::Wait { remaining, mark } => match mark {
                Some(mark) => {
                    let ticket = mark.ticket.unwrap_or(token);
                    Db::<A>::run(conn, write(mark.slot, ticket, mark.ttl)).await?;
                    let marked = true;
                    (Attempt::Wait { remaining, marked }, "COMMIT")
                }
                None => {
                    let marked = false;
                    (Attempt::Wait { remaining, marked }, "ROLLBACK")
                }
            },
            Plan::Take { slot, permits } => {
                if let Some(permits) = permits {
                    let mut values = vec![Value::Int(permits.into())];
                    values.extend_from_slice(bid.key);
                    Db::<A>::run(conn, query(&self.set_permits, &values)).await?;
                }
                // Expired shares are dead (a renewal needs an unexpired row):
                // tidy them away while the head lock is ours.
                if rows.iter().any(|row| row.slot != HEAD_SLOT && !row.live) {
                    Db::<A>::run(conn, query(&self.drop_expired, &bid.with([]))).await?;
                }
                let sent_at = Instant::now();
                Db::<A>::run(conn, write(slot, token, req.ttl)).await?;
                // The taker's own place, if it marked one, is no longer needed.
                let marked = rows
                    .iter()
                    .any(|row| row.slot != slot && row.owner.as_deref() == Some(owner.as_bytes()));
                if marked {
                    let values = [Value::Text(owner.clone()), Value::Int(slot.into())];
                    Db::<A>::run(conn, query(&self.drop_mark, &bid.with(values))).await?;
                }
                let won = Attempt::Won {
                    token,
                    slot,
                    sent_at,
                };
                (won, "COMMIT")
            }
        };
        Db::<A>::text(conn, end, limit).await?;
        conn.holds_nothing();
        Ok(outcome)
    }
}
