//! One contender's key in a lock queue, from the enqueue transaction until it is
//! handed to a held lock (or, for a semaphore, traded for a permit key first).
//!
//! A [`QueueEntry`] is armed with a [`CancelGuard`]: dropped before the
//! hand-over (a cancelled, timed-out or failed acquire), it deletes the key in
//! the background, so nothing is left behind and nobody waits behind a ghost.

use crate::client::{KvClient, TxnResponse};
use crate::error::{Failure, protocol};
use crate::etcd_lease::Slot;
use crate::keys::printable;
use crate::protocol::{self, FirstLook, Recheck};
use crate::rpc::Rpc;
use distlock_core::toolkit::{CancelGuard, UndoFuture};
use prost::bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

/// A transaction under way. The acquire polls it itself; if the acquire is
/// dropped before it answers, the undo takes it over and runs it to its end in
/// the background, so a drop never cuts a request off half-way and no task is
/// spawned on the path that is not cancelled. The `Mutex` is never locked (it
/// is reached through `get_mut` and `into_inner`): it only makes the entry
/// `Sync`, which an acquire holding `&QueueEntry` across an await needs, while
/// the request's own future is `Send` alone.
type InFlight = Mutex<Pin<Box<dyn Future<Output = Result<TxnResponse, Failure>> + Send>>>;

fn in_flight<F>(txn: F) -> InFlight
where
    F: Future<Output = Result<TxnResponse, Failure>> + Send + 'static,
{
    Mutex::new(Box::pin(txn))
}

/// How far our key got.
enum Sent {
    /// Nothing sent yet, or the key is known not to exist.
    Absent,
    /// The enqueue is under way: if the acquire is dropped, the undo waits for
    /// its outcome, then deletes.
    Putting(InFlight),
    /// The key exists with this create revision.
    Queued(i64),
    /// A request that may have created the key got no answer.
    Unknown,
    /// The queued key (created at `from`) is being traded for the key `to` in
    /// one transaction, under way as the enqueue is.
    Trading { from: i64, to: Bytes, txn: InFlight },
    /// The trade went through: the queued key is gone and `key` exists,
    /// created at `revision`.
    Traded { key: Bytes, revision: i64 },
}

/// What the undo needs: how far the key got, and the lease slot it uses (left
/// unclean, so the lease is tainted, whenever the key may outlive the undo).
struct Pending {
    sent: Sent,
    slot: Slot,
}

type Undo = Box<dyn FnOnce(Pending) -> Option<UndoFuture> + Send + Sync>;

/// Our key in the queue, deleted on drop unless handed over.
pub(crate) struct QueueEntry {
    rpc: Rpc,
    kv: KvClient,
    key: Bytes,
    guard: CancelGuard<Pending, Undo>,
}

impl std::fmt::Debug for QueueEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueEntry")
            .field("key", &printable(&self.key))
            .finish_non_exhaustive()
    }
}

impl QueueEntry {
    /// Arms the cleanup of `key`, which nothing has sent yet.
    pub(crate) fn new(rpc: Rpc, kv: KvClient, key: Bytes, slot: Slot) -> Self {
        let undo: Undo = {
            let (rpc, kv, key) = (rpc.clone(), kv.clone(), key.clone());
            Box::new(move |pending| undo(pending, rpc, kv, key))
        };
        QueueEntry {
            rpc,
            kv,
            key,
            guard: CancelGuard::new(
                Pending {
                    sent: Sent::Absent,
                    slot,
                },
                undo,
            ),
        }
    }

    pub(crate) fn key(&self) -> &Bytes {
        &self.key
    }

    fn set(&mut self, sent: Sent) {
        if let Some(pending) = self.guard.state_mut() {
            pending.sent = sent;
        }
    }

    /// Step 1 of the protocol: puts our key and reads the holder and our
    /// predecessor ([`protocol::enqueue`]).
    pub(crate) async fn enqueue(
        &mut self,
        queue: &[u8],
        lease: i64,
        value: &[u8],
    ) -> Result<FirstLook, Failure> {
        let response = self
            .put(protocol::enqueue(
                self.rpc.clone(),
                self.kv.clone(),
                Bytes::copy_from_slice(queue),
                self.key.clone(),
                lease,
                Bytes::copy_from_slice(value),
            ))
            .await?;
        protocol::first_look(&response)
    }

    /// Records `sent`, a transaction under way, and awaits it. The caller
    /// records the outcome with no await between, so the undo never polls a
    /// finished transaction again.
    async fn run(&mut self, sent: Sent) -> Result<TxnResponse, Failure> {
        self.set(sent);
        match self.guard.state_mut() {
            Some(Pending {
                sent: Sent::Putting(txn) | Sent::Trading { txn, .. },
                ..
            }) => txn.get_mut().unwrap_or_else(PoisonError::into_inner).await,
            _ => Err(protocol("queue entry state changed under it").into()),
        }
    }

    /// Sends `txn`, a transaction that puts our key if absent and otherwise
    /// reads it first (as [`protocol::enqueue`] does), so the undo knows whether
    /// the key exists from [`protocol::enqueued_revision`].
    pub(crate) async fn put<F>(&mut self, txn: F) -> Result<TxnResponse, Failure>
    where
        F: Future<Output = Result<TxnResponse, Failure>> + Send + 'static,
    {
        let outcome = self.run(Sent::Putting(in_flight(txn))).await;
        let response = match outcome {
            Ok(response) => response,
            Err(failure) => {
                // An error reply means the transaction was not applied; silence may
                // hide one that was.
                self.set(if failure.is_silent() {
                    Sent::Unknown
                } else {
                    Sent::Absent
                });
                return Err(failure);
            }
        };
        match protocol::enqueued_revision(&response) {
            Some(revision) => self.set(Sent::Queued(revision)),
            // The transaction neither put the key nor found it.
            None if !response.succeeded() => self.set(Sent::Absent),
            None => self.set(Sent::Unknown),
        }
        Ok(response)
    }

    /// Trades our queued key (created at `from`) for `to` with `txn`, which
    /// succeeds only if it deleted ours and created `to` (a semaphore's claim of
    /// a permit slot). A failed compare leaves our key as it was.
    pub(crate) async fn trade<F>(
        &mut self,
        from: i64,
        to: &Bytes,
        txn: F,
    ) -> Result<TxnResponse, Failure>
    where
        F: Future<Output = Result<TxnResponse, Failure>> + Send + 'static,
    {
        let trading = Sent::Trading {
            from,
            to: to.clone(),
            txn: in_flight(txn),
        };
        let outcome = self.run(trading).await;
        match &outcome {
            Ok(response) if response.succeeded() => match response.header() {
                Some(header) => self.set(Sent::Traded {
                    key: to.clone(),
                    revision: header.revision(),
                }),
                None => self.set(Sent::Unknown),
            },
            Ok(_) => self.set(Sent::Queued(from)),
            Err(failure) if failure.is_silent() => self.set(Sent::Unknown),
            Err(_) => self.set(Sent::Queued(from)),
        }
        outcome
    }

    /// Step 2 of the protocol, after a wake-up: the key before ours, and whether
    /// ours (created at `revision`) still exists.
    pub(crate) async fn recheck(&self, queue: &[u8], revision: i64) -> Result<Recheck, Failure> {
        protocol::recheck(&self.rpc, &self.kv, queue, &self.key, revision).await
    }

    /// Deletes our key now (a `Wait::No` miss, a wait that ran out), so a retry
    /// does not queue behind it.
    pub(crate) async fn remove(&mut self) -> Result<(), Failure> {
        let queued = match self.guard.state_mut() {
            Some(Pending {
                sent: Sent::Queued(revision),
                ..
            }) => *revision,
            _ => return Ok(()),
        };
        protocol::delete_if_created_at(&self.rpc, &self.kv, &self.key, queued).await?;
        self.set(Sent::Absent);
        Ok(())
    }

    /// Forgets a key that is already gone (its lease expired).
    pub(crate) fn mark_gone(&mut self) {
        self.set(Sent::Absent);
    }

    /// Hands the key over to a held lock: it is no longer deleted on drop. The
    /// key is ours, or the one we traded it for.
    pub(crate) fn into_held(self) -> Option<(Bytes, Slot)> {
        let QueueEntry { key, guard, .. } = self;
        guard.disarm().map(|pending| match pending.sent {
            Sent::Traded { key, .. } => (key, pending.slot),
            _ => (key, pending.slot),
        })
    }
}

/// Deletes a key the acquire no longer wants. A slot whose key is known gone is
/// marked clean; one whose key may remain stays unclean, so its lease is tainted
/// and the key dies with the ttl.
fn undo(pending: Pending, rpc: Rpc, kv: KvClient, key: Bytes) -> Option<UndoFuture> {
    let Pending { sent, slot } = pending;
    if matches!(sent, Sent::Absent) {
        slot.mark_clean();
        return None;
    }
    Some(Box::pin(async move {
        let (key, revision) = match sent {
            Sent::Traded { key, revision } => (key, Some(revision)),
            Sent::Trading { from, to, txn } => match finish(txn).await {
                Ok(response) if response.succeeded() => {
                    (to, response.header().map(|h| h.revision()))
                }
                Ok(_) => (key, Some(from)),
                Err(failure) if !failure.is_silent() => (key, Some(from)),
                Err(_) => (key, None),
            },
            sent => (key, queued_revision(sent, &slot).await),
        };
        let Some(revision) = revision else {
            return;
        };
        match protocol::delete_if_created_at(&rpc, &kv, &key, revision).await {
            Ok(_) => slot.mark_clean(),
            Err(_) => tracing::debug!(
                key = %printable(&key),
                "cleanup of a cancelled acquire failed; the key expires with its lease"
            ),
        }
    }))
}

/// The create revision of the queued key, once the enqueue's outcome is known;
/// `None` when it is unknown or the key is known absent (then the slot is
/// marked clean).
async fn queued_revision(sent: Sent, slot: &Slot) -> Option<i64> {
    match sent {
        Sent::Queued(revision) => Some(revision),
        Sent::Putting(txn) => match finish(txn).await {
            Ok(response) => {
                let revision = protocol::enqueued_revision(&response);
                if revision.is_none() && !response.succeeded() {
                    slot.mark_clean();
                }
                revision
            }
            Err(failure) if !failure.is_silent() => {
                slot.mark_clean();
                None
            }
            Err(_) => None,
        },
        _ => None,
    }
}

/// Runs a transaction the dropped acquire left under way to its outcome.
async fn finish(txn: InFlight) -> Result<TxnResponse, Failure> {
    txn.into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .await
}
