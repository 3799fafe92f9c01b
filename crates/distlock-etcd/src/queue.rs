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
use distlock_core::LockError;
use distlock_core::toolkit::{CancelGuard, UndoFuture};
use std::future::Future;
use tokio::task::JoinHandle;

/// How far our key got.
enum Sent {
    /// Nothing sent yet, or the key is known not to exist.
    Absent,
    /// The enqueue runs in a task of its own, so dropping the caller cannot cut
    /// it off half-way: the undo waits for its outcome, then deletes.
    Putting(JoinHandle<Result<TxnResponse, Failure>>),
    /// The key exists with this create revision.
    Queued(i64),
    /// A request that may have created the key got no answer.
    Unknown,
    /// The queued key (created at `from`) is being traded for the key `to` in
    /// one transaction, run in a task of its own as the enqueue is.
    Trading {
        from: i64,
        to: Vec<u8>,
        task: JoinHandle<Result<TxnResponse, Failure>>,
    },
    /// The trade went through: the queued key is gone and `key` exists,
    /// created at `revision`.
    Traded { key: Vec<u8>, revision: i64 },
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
    key: Vec<u8>,
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
    pub(crate) fn new(rpc: Rpc, kv: KvClient, key: Vec<u8>, slot: Slot) -> Self {
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

    pub(crate) fn key(&self) -> &[u8] {
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
                queue.to_vec(),
                self.key.clone(),
                lease,
                value.to_vec(),
            ))
            .await?;
        protocol::first_look(&response)
    }

    /// Records `sent`, a transaction under way in a task of its own, and
    /// awaits the task. The caller records the outcome with no await between,
    /// so the undo never awaits a finished task twice.
    async fn run(&mut self, sent: Sent) -> Result<TxnResponse, Failure> {
        self.set(sent);
        let task = match self.guard.state_mut() {
            Some(Pending {
                sent: Sent::Putting(task) | Sent::Trading { task, .. },
                ..
            }) => task,
            _ => return Err(protocol("queue entry state changed under it").into()),
        };
        match task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(LockError::backend(crate::error::BACKEND, e).into()),
        }
    }

    /// Sends `txn`, a transaction that puts our key if absent and otherwise
    /// reads it first (as [`protocol::enqueue`] does), so the undo knows whether
    /// the key exists from [`protocol::enqueued_revision`].
    pub(crate) async fn put<F>(&mut self, txn: F) -> Result<TxnResponse, Failure>
    where
        F: Future<Output = Result<TxnResponse, Failure>> + Send + 'static,
    {
        let outcome = self.run(Sent::Putting(tokio::spawn(txn))).await;
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
        to: &[u8],
        txn: F,
    ) -> Result<TxnResponse, Failure>
    where
        F: Future<Output = Result<TxnResponse, Failure>> + Send + 'static,
    {
        let trading = Sent::Trading {
            from,
            to: to.to_vec(),
            task: tokio::spawn(txn),
        };
        let outcome = self.run(trading).await;
        match &outcome {
            Ok(response) if response.succeeded() => match response.header() {
                Some(header) => self.set(Sent::Traded {
                    key: to.to_vec(),
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
    pub(crate) fn into_held(self) -> Option<(Vec<u8>, Slot)> {
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
fn undo(pending: Pending, rpc: Rpc, kv: KvClient, key: Vec<u8>) -> Option<UndoFuture> {
    let Pending { sent, slot } = pending;
    if matches!(sent, Sent::Absent) {
        slot.mark_clean();
        return None;
    }
    Some(Box::pin(async move {
        let (key, revision) = match sent {
            Sent::Traded { key, revision } => (key, Some(revision)),
            Sent::Trading { from, to, task } => match task.await {
                Ok(Ok(response)) if response.succeeded() => {
                    (to, response.header().map(|h| h.revision()))
                }
                Ok(Ok(_)) => (key, Some(from)),
                Ok(Err(failure)) if !failure.is_silent() => (key, Some(from)),
                Ok(Err(_)) | Err(_) => (key, None),
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
        Sent::Putting(task) => match task.await {
            Ok(Ok(response)) => {
                let revision = protocol::enqueued_revision(&response);
                if revision.is_none() && !response.succeeded() {
                    slot.mark_clean();
                }
                revision
            }
            Ok(Err(failure)) if !failure.is_silent() => {
                slot.mark_clean();
                None
            }
            Ok(Err(_)) | Err(_) => None,
        },
        _ => None,
    }
}
