//! Waiting by polling, for `version_cas` and `unique_insert`: one attempt, then
//! a jittered exponential backoff capped at 250 ms and bounded by the holder's
//! remaining ttl, until the lock is won or the wait ends.

use crate::backend::{Table, micros, undo};
use crate::error::DbError;
use crate::keys::row_name;
use crate::pool::Conn;
use distlock_core::backend::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, random_owner};
use distlock_core::{FencingToken, LockError};
use sqlx::SqlStr;
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

/// What every attempt of one acquisition binds.
#[derive(Debug)]
pub(crate) struct Bid {
    pub row: Vec<u8>,
    /// Fresh per acquisition, so compare-owner statements never match another's.
    pub owner: String,
    /// The ttl in microseconds.
    pub ttl: u64,
}

/// One contender's attempts on the lock, as the strategy defines them.
pub(crate) trait Contender: Send {
    /// One attempt on `conn`.
    fn attempt<'a>(
        &'a mut self,
        table: &'a Table,
        bid: &'a Bid,
        conn: &'a mut Conn,
    ) -> BoxFuture<'a, Result<Attempt, DbError>>;
}

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Attempts until won, `Busy` for `NoWait`, or `Timeout` at the deadline.
///
/// Once an attempt's statement is sent, its outcome is unknown until the reply:
/// an attempt dropped (deadline, cancelled future) or failed midway runs
/// `release`, a compare-owner statement bound to `(row, owner)`, in the
/// background. A dropped attempt also closes its connection, which may still
/// carry the reply.
pub(crate) async fn acquire_polling(
    table: &Arc<Table>,
    req: &AcquireRequest<'_>,
    release: &SqlStr,
    mut contender: impl Contender,
) -> Result<Acquired<RowHandle>, LockError> {
    let bid = Bid {
        row: row_name(req.key),
        owner: random_owner(),
        ttl: micros(req.ttl),
    };
    let no_wait = req.wait == WaitUntil::NoWait;
    let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
    loop {
        let one_try = async {
            let mut conn = table.pool.get().await?;
            let statement = sqlx::query(release.clone())
                .bind(bid.row.clone())
                .bind(bid.owner.clone());
            let guard = CancelGuard::new((table.clone(), statement), undo);
            let attempt = contender.attempt(table, &bid, &mut conn).await?;
            // Won: the handle owns the row from here on. Held: nothing was won.
            guard.disarm();
            Ok(attempt)
        };
        let outcome = tokio::select! {
            biased;
            outcome = one_try => outcome,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        match outcome.map_err(|e| table.error(e))? {
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
