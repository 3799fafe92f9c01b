//! The lock of the row strategies (`version_cas` on both databases, MySQL's
//! `unique_insert`), written once: a [`Backend`] over one [`Contender`]'s
//! attempts, waiting by polling. One attempt, then a jittered exponential
//! backoff capped at 250 ms and never past the holder's remaining ttl, cut
//! short by a release's wake-up where the adapter has them, or first a wait
//! on the holder's doorbell ([`crate::bell`]) where it has those (otherwise
//! waiters poll alone), until the lock is won or the wait ends. An attempt
//! refused for row-lock contention (deadlock, lock wait timeout,
//! serialization failure) was rolled back whole; it is undone and tried again
//! the same way within the caller's wait. Not a stable API.

use crate::bell::{Ringer, Rung};
use crate::db_error::DbError;
use crate::pool::{Conn, PoolDialect, Statement};
use crate::settle::retry_until;
use crate::table::{Db, LockTable, TableDb, Undo, Value, compare_owner, micros, statement, undo};
use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, Ownership, WaitUntil};
use distlock_core::toolkit::{Backoff, CancelGuard, Inspect, random_owner};
use distlock_core::{Capabilities, FencingToken, HolderMeta, LockError, LockKey};
use sqlx::SqlStr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::futures::Notified;

/// The first pause after a failed attempt (here and in the shares' wait).
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a release whose wake-up was lost (or never sent) is
/// seen within this (plus one attempt).
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What one attempt found.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is ours; `sent_at` was taken before the statement that won it.
    Won {
        /// The fencing token.
        token: u64,
        /// When the winning statement went out.
        sent_at: Instant,
    },
    /// Someone holds it for about `remaining` more (by the server clock; zero
    /// when unknown).
    Held {
        /// Until the holder's expiry.
        remaining: Duration,
    },
}

/// What a lock held in a row keeps: the values naming its row, the owner
/// value the compare-owner statements check, the token, and the doorbell it
/// rings once released.
#[derive(Debug)]
pub struct RowHandle {
    key: Vec<Value>,
    owner: String,
    fence: u64,
    bell: Option<Ringer>,
}

/// What one attempt binds.
#[derive(Debug)]
pub struct Bid<'a> {
    /// The lock's name.
    pub key: &'a LockKey,
    /// The values naming its row ([`LockTable::key`]).
    pub row: Vec<Value>,
    /// Fresh per attempt: compare-owner statements never match another
    /// acquisition's row, and the background undo of a failed attempt never
    /// matches the row a later attempt of the same acquisition won.
    pub owner: String,
    /// The holder's metadata, encoded ([`HolderMeta::encode`]).
    pub meta: String,
    /// The ttl.
    pub ttl: Duration,
    /// Until when statements refused for row-lock contention are retried
    /// within the attempt.
    pub until: WaitUntil,
}

impl Bid<'_> {
    /// `first`, then the row's values, then `last`, in the statements' order.
    pub fn values(&self, first: &[Value], last: &[Value]) -> Vec<Value> {
        let mut values = first.to_vec();
        values.extend_from_slice(&self.row);
        values.extend_from_slice(last);
        values
    }
}

/// One contender's attempts on the lock, as its strategy defines them; one
/// clone per acquire.
#[async_trait]
pub trait Contender<A: LockTable>: Clone + Send + Sync + 'static {
    /// One attempt on `conn`. Cancel-safe: dropped at any await, the
    /// loop's undo gives back what it may have won.
    async fn attempt(
        &mut self,
        table: &A,
        bid: &Bid<'_>,
        conn: &mut Conn<A::Dialect>,
    ) -> Result<Attempt, DbError>;
}

/// A row strategy's owner-checked statements. Binds: `renew` the ttl in µs,
/// the row, the owner (and the token `with_fence`); `release` the row, the
/// owner (and the token); `abandon`, which frees whatever an attempt whose
/// reply never came may have won, the row and the owner.
#[derive(Debug, Clone)]
pub struct OwnerChecked {
    /// Extends a held row's expiry.
    pub renew: SqlStr,
    /// Frees a held row.
    pub release: SqlStr,
    /// Frees what an abandoned attempt may have won.
    pub abandon: SqlStr,
    /// Whether renew and release also match the token (a row that persists
    /// across holders).
    pub with_fence: bool,
}

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

/// The statement that renews (with `ttl`) or frees `handle`'s row.
fn owner_checked<DB: TableDb>(
    rows: &OwnerChecked,
    sql: &SqlStr,
    ttl: Option<Duration>,
    handle: &RowHandle,
) -> Statement<DB> {
    let mut values: Vec<Value> = ttl.map(|ttl| Value::Int(micros(ttl))).into_iter().collect();
    values.extend(handle.key.iter().cloned());
    values.push(Value::Text(handle.owner.clone()));
    if rows.with_fence {
        values.push(Value::Int(handle.fence));
    }
    statement(sql, values)
}

/// One attempt of `contender` and the release of what it won, on one
/// connection, as a benchmark's floor: `Ok(false)` when the row was held.
pub async fn floor_cycle<A: LockTable, C: Contender<A>>(
    table: &A,
    contender: &C,
    rows: &OwnerChecked,
    key: &LockKey,
    ttl: Duration,
) -> Result<bool, DbError> {
    let bid = Bid {
        key,
        row: table.key(key),
        owner: random_owner(),
        meta: HolderMeta::this_process().encode(),
        ttl,
        until: WaitUntil::Deadline(Instant::now() + table.pool().timeout()),
    };
    let mut conn = Db::<A>::connection(table.pool()).await?;
    let fence = match contender.clone().attempt(table, &bid, &mut conn).await? {
        Attempt::Won { token, .. } => token,
        Attempt::Held { .. } => return Ok(false),
    };
    let handle = RowHandle {
        key: bid.row,
        owner: bid.owner,
        fence,
        bell: None,
    };
    let release = owner_checked(rows, &rows.release, None, &handle);
    Db::<A>::run(&mut conn, release).await?;
    Ok(true)
}

#[async_trait]
impl<A: LockTable + Inspect, C: Contender<A>> Backend for Polling<A, C> {
    type Handle = RowHandle;

    fn name(&self) -> &'static str {
        <A::Dialect as PoolDialect>::TEXTS.backend
    }

    fn capabilities(&self) -> Capabilities {
        self.table.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<RowHandle>, LockError> {
        self.poll(&req).await
    }

    async fn renew(&self, handle: &RowHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let renew = || owner_checked(&self.rows, &self.rows.renew, Some(ttl), handle);
        compare_owner(self.table.pool(), renew).await
    }

    async fn release(&self, handle: &RowHandle) -> Result<Ownership, LockError> {
        let release = || owner_checked(&self.rows, &self.rows.release, None, handle);
        let released = compare_owner(self.table.pool(), release).await;
        if let Some(bell) = &handle.bell {
            bell.ring(self.table.pool().timeout()).await;
        }
        released
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
    /// still carry the reply, and its undo waits until the server ended that
    /// session (see [`undo`]): run before the cut-off statement, the abandon
    /// would match nothing.
    async fn poll(&self, req: &AcquireRequest<'_>) -> Result<Acquired<RowHandle>, LockError> {
        let table = &self.table;
        let pool = table.pool();
        let no_wait = req.wait == WaitUntil::No;
        let until = retry_until(req);
        let waiter = table.waiter(req.key, None);
        let mut contender = self.contender.clone();
        let mut backoff = Backoff::new(FIRST_PAUSE, MAX_PAUSE);
        // The last wait ended with the holder's doorbell.
        let mut rang = false;
        let (row, meta) = (table.key(req.key), req.meta.encode());
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
                owner: random_owner(),
                meta: meta.clone(),
                ttl: req.ttl,
                until,
            };
            let one_try = async {
                let mut conn = Db::<A>::connection(pool).await?;
                let abandon = self.rows.abandon.clone();
                let mine = bid.values(&[], &[Value::Text(bid.owner.clone())]);
                let state = Undo {
                    table: table.clone(),
                    in_flight: Some(conn.session()),
                    make: Some(Box::new(move || statement(&abandon, mine.clone()))),
                };
                let mut guard = CancelGuard::new(state, undo);
                let attempt = contender.attempt(table, &bid, &mut conn).await;
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
            let outcome = match outcome {
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
            match outcome {
                Attempt::Won { token, sent_at } => {
                    let handle = RowHandle {
                        key: bid.row,
                        owner: bid.owner,
                        fence: token,
                        bell: table.doorbell().map(|bell| bell.keep(req.key)),
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
                    // Never sleep past the holder's expiry: a crashed holder is
                    // taken over as soon as the server lets us.
                    let bound = remaining + Duration::from_millis(1);
                    if let Some(bell) = table.doorbell() {
                        let rung = tokio::select! {
                            rung = bell.wait(req.key, bound) => rung,
                            _ = req.wait.reached() => return Err(req.not_acquired()),
                        };
                        if rung != Rung::Unkept {
                            backoff.reset();
                            rang = true;
                            continue;
                        }
                        // Rung, then beaten to the row: the winner keeps its bell
                        // a round trip after its win, so look again soon.
                        if std::mem::take(&mut rang) {
                            backoff.reset();
                        }
                    }
                    tokio::select! {
                        () = woken(notified.as_mut().map(Pin::as_mut)) => backoff.reset(),
                        more = backoff.pause(bound, req.wait) => if !more {
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
