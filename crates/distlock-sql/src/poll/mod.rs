//! The lock of the row strategies (`version_cas` on both databases, MySQL's
//! `unique_insert`), written once: a [`Backend`] over one [`Contender`]'s
//! attempts. Where the adapter has doorbells ([`crate::table::bell`]), every
//! attempt of one acquire runs on one connection and first waits, at most
//! until the holder's expiry, to take the name's bell: waiters queue on the
//! server, and a release hands the lock to the first of them. Otherwise, and
//! when an attempt takes the bell but finds the row held by someone who keeps
//! none, one attempt is followed by a jittered exponential backoff capped at
//! 250 ms and never past the holder's remaining ttl, cut short by a release's
//! wake-up where the adapter has them, until the lock is won or the wait
//! ends. Where releases notify only names marked as waited for, the first
//! busy attempt marks the name and tries once more before the first pause.
//! An attempt refused for row-lock contention (deadlock, lock wait timeout,
//! serialization failure) was rolled back whole; it is undone and tried again
//! the same way within the caller's wait. Not a stable API.

mod attempt;
mod floor;

pub use attempt::{Attempt, Bid, Contender, OwnerChecked, RowHandle};
pub use floor::floor_cycle;

use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect};
use crate::settle::retry_until;
use crate::table::bell::LONGEST_RING;
use crate::table::{Db, LockTable, TableDb, Undo, Value, Wake, compare_owner, statement, undo};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, Inspect, random_owner};
use distlock_core::{Capabilities, FencingToken, LockError};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::futures::Notified;

/// The first pause after a failed attempt (here and in the shares' wait).
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a release whose wake-up was lost (or never sent) is
/// seen within this (plus one attempt).
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);

/// A row strategy's backend: `C` makes its attempts on `A`'s table.
#[derive(Debug)]
pub struct Polling<A, C> {
    /// The lock table.
    pub table: Arc<A>,
    contender: C,
    rows: OwnerChecked,
}

impl<A: LockTable, C: Contender<A>> Polling<A, C> {
    /// A client of `table` whose attempts `contender` makes and whose rows
    /// `rows` renews and frees.
    pub fn new(table: Arc<A>, contender: C, rows: OwnerChecked) -> Self {
        Polling {
            table,
            contender,
            rows,
        }
    }
}

/// One acquire's connection for the name's bell: back to the pool when it is
/// dropped only if it never took the bell (and its last statement answered).
struct Belled<D: PoolDialect> {
    conn: Option<Conn<D>>,
    kept: bool,
}

impl<D: PoolDialect> Drop for Belled<D> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut()
            && !self.kept
        {
            conn.holds_nothing();
        }
    }
}

#[async_trait]
impl<A: LockTable + Inspect, C: Contender<A>> Backend for Polling<A, C> {
    type Handle = RowHandle<A::Dialect>;

    fn name(&self) -> &'static str {
        <A::Dialect as PoolDialect>::TEXTS.backend
    }

    fn capabilities(&self) -> Capabilities {
        self.table.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<Self::Handle>, LockError> {
        self.poll(&req).await
    }

    async fn renew(&self, handle: &Self::Handle, ttl: Duration) -> Result<Ownership, LockError> {
        let renew = || statement(&self.rows.renew, &self.rows.values(Some(ttl), handle));
        compare_owner(self.table.pool(), renew).await
    }

    /// On the connection that keeps the bell, the release and the bell's
    /// give-back in one round trip; otherwise (or if that fails: the
    /// connection closed, which gives the bell back) the release alone.
    async fn release(&self, handle: &Self::Handle) -> Result<Ownership, LockError> {
        let values = self.rows.values(None, handle);
        let kept = handle
            .bell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(mut conn), Some(bell)) = (kept, self.table.doorbell()) {
            match bell.release(&mut conn, (&self.rows.release, &values)).await {
                Ok(matched) => {
                    conn.holds_nothing();
                    return Ok(match matched {
                        0 => Ownership::NotHeld,
                        _ => Ownership::Held,
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the release on the bell's connection failed; releasing on another");
                    conn.discard();
                }
            }
        }
        compare_owner(self.table.pool(), || statement(&self.rows.release, &values)).await
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(&*self.table)
    }
}

impl<A: LockTable, C: Contender<A>> Polling<A, C> {
    /// Attempts until won, `Busy` for `WaitUntil::No`, or `Timeout` at the
    /// deadline.
    ///
    /// Once an attempt's statement is sent, its outcome is unknown until the
    /// reply: an attempt dropped (deadline, cancelled future) or failed midway
    /// runs `abandon`, a compare-owner statement bound to `(row, owner)`, in
    /// the background. A dropped attempt also closes its connection, which may
    /// still carry the reply (or wait for a bell), and its undo waits until
    /// the server ended that session (see [`undo`]): run before the cut-off
    /// statement, the abandon would match nothing.
    async fn poll(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Acquired<RowHandle<A::Dialect>>, LockError> {
        let table = &self.table;
        let pool = table.pool();
        let no_wait = req.wait == WaitUntil::No;
        let until = retry_until(req);
        // Registered at the first busy attempt: an acquire that wins at once
        // (the common case) never touches the shared wake-up map.
        let mut waiter: Option<A::Waiter> = None;
        let mut contender = self.contender.clone();
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        let (row, meta) = (table.key(req.key), Arc::<str>::from(req.meta.encode()));
        let bell = table.doorbell();
        let mut belled = Belled {
            conn: match bell {
                Some(bell) => bell.connection().await,
                None => None,
            },
            kept: false,
        };
        // The first attempt waits for no bell: the holder's expiry is unknown.
        let mut bound = Duration::ZERO;
        // A waiter is registered and the name marked as waited for (or the
        // adapter has no waiters or no marks).
        let mut marked = false;
        loop {
            // Armed before the attempt: a release between the attempt's reply
            // and the pause below still wakes it.
            let mut notified = waiter.as_deref().map(|notify| Box::pin(notify.notified()));
            if let Some(notified) = notified.as_mut() {
                notified.as_mut().enable();
            }
            let bid = Bid {
                key: req.key,
                row: row.clone(),
                owner: random_owner().into(),
                meta: meta.clone(),
                ttl: req.ttl,
                until,
            };
            let ring = bell.filter(|_| belled.conn.is_some());
            let one_try = async {
                let mut fresh = None;
                let conn = match belled.conn.as_mut() {
                    Some(conn) => conn,
                    None => fresh.insert(Db::<A>::connection(pool).await?),
                };
                let abandon = self.rows.abandon.clone();
                let mine = bid.values(&[], &[Value::Text(bid.owner.clone())]);
                let state = Undo {
                    table: table.clone(),
                    in_flight: Some(conn.session()),
                    make: Some(Box::new(move || statement(&abandon, &mine))),
                };
                let mut guard = CancelGuard::new(state, undo);
                let attempt = match ring {
                    Some(bell) => contender
                        .attempt_belled(table, &bid, conn, bell, bound)
                        .await
                        .map(|(attempt, rung)| (attempt, Some(rung))),
                    None => contender
                        .attempt(table, &bid, conn)
                        .await
                        .map(|a| (a, None)),
                };
                // Answered: nothing of this attempt still runs on the server
                // (and a connection that answered an error may be back in the
                // pool, so its session must not be ended).
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
            if outcome.is_err()
                && let Some(mut conn) = belled.conn.take()
            {
                // Whether it took the bell is unknown: closed, it gives it back.
                // The next attempts poll.
                conn.discard();
                belled.kept = false;
            }
            let (outcome, rung) = match outcome {
                // Refused for row-lock contention: rolled back, and anything the
                // attempt won is being undone. Try again within the wait.
                Err(e) if e.lost_to_contention() => {
                    if !backoff.pause(MAX_PAUSE, until).await {
                        return Err(req.not_acquired());
                    }
                    continue;
                }
                other => other.map_err(|e| pool.error(e))?,
            };
            belled.kept |= rung.is_some_and(|rung| rung.kept);
            match outcome {
                Attempt::Won { token, sent_at } => {
                    let kept = belled.kept.then(|| belled.conn.take()).flatten();
                    let handle = RowHandle {
                        key: bid.row,
                        owner: bid.owner,
                        fence: token,
                        bell: Mutex::new(kept),
                    };
                    let token = FencingToken::new(token);
                    return Ok(Acquired {
                        handle,
                        token,
                        sent_at,
                    });
                }
                Attempt::Held { remaining } => {
                    if no_wait {
                        return Err(req.not_acquired());
                    }
                    // Never wait past the holder's expiry: a crashed holder is
                    // taken over as soon as the server lets us.
                    let until_expiry = remaining + Duration::from_millis(1);
                    let asked = std::mem::replace(&mut bound, until_expiry.min(LONGEST_RING));
                    if let Some(left) = req.wait.instant() {
                        bound = bound.min(left.saturating_duration_since(Instant::now()));
                    }
                    // The bell's wait was the pause, unless the bell was ours
                    // already or the server cut the wait short (MySQL rounds
                    // it to whole seconds).
                    if let Some(rung) = rung
                        && !belled.kept
                        && rung.waited * 2 >= asked
                    {
                        backoff.reset();
                        continue;
                    }
                    // The first busy attempt registers a waiter and marks
                    // the name, then tries again at once, armed: a release
                    // before the registration or the mark is seen by that
                    // try, and one after them notifies (see `Wake::mark`).
                    if !marked {
                        marked = true;
                        // `None` until a waiter is registered; dropped to
                        // end its borrow of `waiter`.
                        drop(notified);
                        if let Some(registered) = table.waiter(req.key, None) {
                            let waiter = waiter.insert(registered);
                            tokio::select! {
                                biased;
                                _ = waiter.mark() => {}
                                _ = req.wait.reached() => return Err(req.not_acquired()),
                            }
                            continue;
                        }
                        notified = None;
                    }
                    tokio::select! {
                        () = woken(notified.as_mut().map(Pin::as_mut)) => backoff.reset(),
                        more = backoff.pause(until_expiry, req.wait) => if !more {
                            return Err(req.not_acquired());
                        },
                    }
                }
            }
        }
    }
}

/// Until `notified` fires; never without one.
pub(crate) async fn woken(notified: Option<Pin<&mut Notified<'_>>>) {
    match notified {
        Some(notified) => notified.await,
        None => std::future::pending().await,
    }
}
