//! Taking a share (see `shares` for the layout and its invariants): one
//! transaction per attempt that locks the name's head row, reads every row of
//! the name and takes a share, marks its place or takes nothing, as the
//! primitive's [`Taker`] plans; between attempts a jittered poll.

use crate::backend::{MakeStatement, Undo, micros, retry_until, undo};
use crate::error::DbError;
use crate::pool::Conn;
use crate::protocol::HELD_FLAG;
use crate::shares::{HEAD_SLOT, Plan, ShareHandle, ShareRow, Shares, Taker};
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, UndoFuture, random_owner};
use distlock_core::{FencingToken, LockError};
use sqlx::{SqlSafeStr, SqlStr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first pause after an attempt that found no room.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a freed share is seen within this (plus one attempt).
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// Undoes an acquire given up on: deletes its owner's rows.
type ShareGuard = CancelGuard<Undo, fn(Undo) -> Option<UndoFuture>>;

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

/// Takes a share of `name` as `taker` decides, waiting per `req.wait` by
/// polling. Returns the handle and its slot. Cancel-safe: an attempt cut off
/// after its first statement deletes, in the background, whatever rows its
/// owner may have committed (after the cut-off session ended).
pub(crate) async fn take(
    shares: &Arc<Shares>,
    req: &AcquireRequest<'_>,
    name: Vec<u8>,
    taker: &dyn Taker,
) -> Result<(Acquired<ShareHandle>, u32), LockError> {
    let no_wait = req.wait == WaitUntil::No;
    let until = retry_until(req);
    // One owner for the whole acquire: a waiter's place, committed by one
    // attempt, is recognised as its own by the next.
    let owner = random_owner();
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    let mut marked = false;
    // After an attempt found no room, the next ones look without locks first.
    let mut peek = false;
    let drop_mine = {
        let (sql, name, owner) = (shares.drop_owner.clone(), name.clone(), owner.clone());
        move || {
            sqlx::query(sql.clone())
                .bind(name.clone())
                .bind(owner.clone())
        }
    };
    // Armed for the whole acquire: a committed place is undone on any exit
    // but a win.
    let mut guard: ShareGuard = CancelGuard::new(
        Undo {
            table: shares.base.clone(),
            in_flight: None,
            make: Box::new(drop_mine) as MakeStatement,
        },
        undo,
    );
    loop {
        let one_try = async {
            let mut conn = shares.base.pool.get().await?;
            if let Some(state) = guard.state_mut() {
                state.in_flight = Some(conn.session().id);
            }
            let bid = Bid {
                name: &name,
                owner: &owner,
                peek,
            };
            let attempt = attempt(shares, req, &bid, taker, &mut conn).await;
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
        match outcome {
            Ok(Attempt::Won {
                token,
                slot,
                sent_at,
            }) => {
                guard.disarm();
                let handle = ShareHandle {
                    shares: shares.clone(),
                    name,
                    owner,
                    fence: token,
                };
                let token = FencingToken::new(token);
                return Ok((
                    Acquired {
                        handle,
                        token,
                        sent_at,
                    },
                    slot,
                ));
            }
            Ok(Attempt::Refuse(e)) => return Err(nothing_left(guard, marked, e)),
            Ok(Attempt::Wait {
                remaining,
                marked: now,
            }) => {
                marked |= now;
                peek = true;
                // Never sleep past the earliest expiry: a crashed holder's share
                // is taken over as soon as the server lets us.
                let bound = remaining + Duration::from_millis(1);
                if no_wait || !backoff.pause(bound, req.wait).await {
                    return Err(nothing_left(guard, marked, req.not_acquired()));
                }
            }
            Err(e) if e.lost_to_contention() => {
                if !backoff.pause(MAX_PAUSE, until).await {
                    return Err(nothing_left(guard, marked, req.not_acquired()));
                }
            }
            Err(e) => return Err(shares.base.error(e)),
        }
    }
}

/// Gives up with `e`. The undo (deleting this acquire's rows) runs only when
/// something of it may be on the server: a committed mark, or an attempt
/// whose reply never came; an acquire that only ever read leaves nothing.
fn nothing_left(mut guard: ShareGuard, marked: bool, e: LockError) -> LockError {
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
    name: &'a [u8],
    owner: &'a str,
    /// Look without locks first.
    peek: bool,
}

/// The rows of `name` by `sql` (locking or not).
async fn read_rows(conn: &mut Conn, sql: &SqlStr, name: &[u8]) -> Result<Vec<ShareRow>, DbError> {
    let rows = conn
        .fetch_all(sqlx::query(sql.clone()).bind(name.to_vec()))
        .await?;
    rows.iter().map(ShareRow::read).collect()
}

/// One transaction: raise the head (locking it), read the rows, and take a
/// share, mark its place, or take nothing, as `taker` plans.
///
/// With `bid.peek`, a read without locks comes first: while nothing can be
/// taken (the usual poll of a full semaphore or a blocked reader) the attempt
/// is that one statement, and waiters do not queue on the head row. Only the
/// locked read decides a grant.
async fn attempt(
    shares: &Shares,
    req: &AcquireRequest<'_>,
    bid: &Bid<'_>,
    taker: &dyn Taker,
    conn: &mut Conn,
) -> Result<Attempt, DbError> {
    let (name, owner) = (bid.name, bid.owner);
    if bid.peek {
        let rows = read_rows(conn, &shares.peek, name).await?;
        if let Plan::Wait {
            remaining,
            mark: None,
        } = taker.plan(&rows, owner.as_bytes())
        {
            let marked = false;
            return Ok(Attempt::Wait { remaining, marked });
        }
    }
    let limit = shares.base.pool.timeout();
    conn.may_hold();
    conn.execute_text("BEGIN".into_sql_str(), limit).await?;
    let bump = sqlx::query(shares.bump_head.clone())
        .bind(name.to_vec())
        .bind(taker.permits());
    let token = conn.execute(bump).await?.last_insert_id();
    if token == 0 || token & HELD_FLAG != 0 {
        return Err(DbError::Protocol(format!(
            "the share counter returned {token}"
        )));
    }
    let rows = read_rows(conn, &shares.rows, name).await?;
    let write = |slot: u32, fence: u64, ttl: Duration| {
        sqlx::query(shares.take.clone())
            .bind(name.to_vec())
            .bind(slot)
            .bind(owner.to_owned())
            .bind(fence)
            .bind(micros(ttl))
    };
    let (outcome, end) = match taker.plan(&rows, owner.as_bytes()) {
        Plan::Refuse(e) => (Attempt::Refuse(e), "ROLLBACK"),
        Plan::Wait { remaining, mark } => match mark {
            Some(mark) => {
                let ticket = mark.ticket.unwrap_or(token);
                conn.execute(write(mark.slot, ticket, mark.ttl)).await?;
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
                let set = sqlx::query(shares.set_permits.clone())
                    .bind(permits)
                    .bind(name.to_vec());
                conn.execute(set).await?;
            }
            // Expired shares are dead (a renewal needs an unexpired row): tidy
            // them away while the head lock is ours.
            if rows.iter().any(|row| row.slot != HEAD_SLOT && !row.live) {
                let expired = sqlx::query(shares.drop_expired.clone()).bind(name.to_vec());
                conn.execute(expired).await?;
            }
            let sent_at = Instant::now();
            conn.execute(write(slot, token, req.ttl)).await?;
            // The taker's own place, if it marked one, is no longer needed.
            let marked = rows
                .iter()
                .any(|row| row.slot != slot && row.owner.as_deref() == Some(owner.as_bytes()));
            if marked {
                let clear = sqlx::query(shares.drop_mark.clone())
                    .bind(name.to_vec())
                    .bind(owner.to_owned())
                    .bind(slot);
                conn.execute(clear).await?;
            }
            (
                Attempt::Won {
                    token,
                    slot,
                    sent_at,
                },
                "COMMIT",
            )
        }
    };
    conn.execute_text(end.into_sql_str(), limit).await?;
    conn.holds_nothing();
    Ok(outcome)
}
