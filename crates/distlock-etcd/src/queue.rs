//! One contender's key in a lock queue, and the transactions that read the queue.
//!
//! [`QueueEntry`] owns the key until it is handed to a held lock. Dropped before
//! that (a cancelled, timed-out or failed acquire), it deletes the key in the
//! background, so nothing is left behind and nobody waits behind a ghost.

use crate::error::{Context, Failure, protocol};
use crate::keys::prefix_end;
use crate::lease::Slot;
use distlock_core::LockError;
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, KvClient, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::task::JoinHandle;

/// What the put-if-absent transaction saw.
#[derive(Debug)]
pub(crate) struct FirstLook {
    /// Our key's create revision: the token if we hold the lock.
    pub revision: i64,
    /// The store revision the transaction ran at.
    pub header: i64,
    /// Whether our key has the lowest create revision in the queue.
    pub holder: bool,
    /// The key just before ours, when the transaction could tell.
    pub predecessor: Option<Vec<u8>>,
}

/// What a re-check of the queue saw.
#[derive(Debug)]
pub(crate) struct Recheck {
    /// The store revision of the read.
    pub header: i64,
    /// Our key still exists with our create revision.
    pub mine: bool,
    /// The key just before ours, if any.
    pub predecessor: Option<Vec<u8>>,
}

enum State {
    /// Nothing sent yet, or the key is known not to exist.
    Absent,
    /// The put-if-absent runs in a task of its own, so dropping the caller cannot
    /// cut it off half-way: the cleanup waits for its outcome, then deletes.
    Putting(JoinHandle<Result<TxnResponse, Failure>>),
    /// The key exists with this create revision.
    Queued(i64),
    /// A request that may have created the key got no answer.
    Unknown,
}

/// Our key in the queue, deleted on drop unless handed over.
pub(crate) struct QueueEntry {
    kv: KvClient,
    ctx: Context,
    key: Vec<u8>,
    state: State,
    slot: Option<Slot>,
}

impl std::fmt::Debug for QueueEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueEntry")
            .field("key", &crate::keys::printable(&self.key))
            .finish_non_exhaustive()
    }
}

fn range(response: Option<&TxnOpResponse>) -> Result<&[KeyValue], Failure> {
    match response {
        Some(TxnOpResponse::Get(get)) => Ok(get.kvs()),
        _ => Err(protocol("a transaction did not return the ranges it was asked for").into()),
    }
}

fn header(response: &TxnResponse) -> Result<i64, Failure> {
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| protocol("a transaction reply without a header").into())
}

/// The queue, oldest first, first key only (Go's `WithFirstCreate`).
fn get_holder(queue: &[u8]) -> TxnOp {
    let options = GetOptions::new()
        .with_range(prefix_end(queue))
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only();
    TxnOp::get(queue, Some(options))
}

/// The newest `limit` keys of the queue created at or before `max_revision` (0: any).
fn get_newest(queue: &[u8], max_revision: i64, limit: i64) -> TxnOp {
    let options = GetOptions::new()
        .with_range(prefix_end(queue))
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_max_create_revision(max_revision)
        .with_limit(limit)
        .with_keys_only();
    TxnOp::get(queue, Some(options))
}

impl QueueEntry {
    pub(crate) fn new(kv: KvClient, ctx: Context, key: Vec<u8>, slot: Slot) -> Self {
        QueueEntry {
            kv,
            ctx,
            key,
            state: State::Absent,
            slot: Some(slot),
        }
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Puts our key if absent and reads the holder and our predecessor, in one
    /// transaction. Etcd's own lock does the same; if the key already exists (only a
    /// lost earlier reply can do that) it is adopted, as Go's `Mutex` does.
    pub(crate) async fn put(&mut self, queue: &[u8], lease: i64) -> Result<FirstLook, Failure> {
        let key = self.key.clone();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease))),
                get_holder(queue),
                // Our fresh key is the newest; the one after it is our predecessor.
                get_newest(queue, 0, 2),
            ])
            .or_else([TxnOp::get(key, None), get_holder(queue)]);
        let (kv, ctx) = (self.kv.clone(), self.ctx.clone());
        self.state = State::Putting(tokio::spawn(async move {
            ctx.txn(&kv, "acquire transaction", txn).await
        }));
        let State::Putting(task) = &mut self.state else {
            return Err(protocol("queue entry state changed under it").into());
        };
        let outcome = match task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(LockError::backend(crate::error::BACKEND, e).into()),
        };
        let response = match outcome {
            Ok(response) => response,
            Err(failure) => {
                // An error reply means the transaction was not applied; silence may
                // hide one that was.
                let silent = matches!(&failure, Failure::Other(LockError::Unavailable { .. }));
                self.state = if silent {
                    State::Unknown
                } else {
                    State::Absent
                };
                return Err(failure);
            }
        };
        let header = header(&response)?;
        let ops = response.op_responses();
        let (revision, predecessor) = if response.succeeded() {
            self.state = State::Queued(header);
            let newest = range(ops.get(2))?;
            (header, newest.get(1).map(|kv| kv.key().to_vec()))
        } else {
            let mine = range(ops.first())?
                .first()
                .ok_or_else(|| Failure::from(protocol("our key vanished inside a transaction")))?;
            self.state = State::Queued(mine.create_revision());
            (mine.create_revision(), None)
        };
        let holder = range(ops.get(1))?.first().map(KeyValue::create_revision);
        Ok(FirstLook {
            revision,
            header,
            holder: holder == Some(revision),
            predecessor,
        })
    }

    /// Reads, in one transaction, the key just before ours and our own key: the
    /// own key must be re-read after waking, since a lease can die while queued.
    pub(crate) async fn recheck(&self, queue: &[u8], revision: i64) -> Result<Recheck, Failure> {
        let txn = Txn::new().and_then([
            get_newest(queue, revision - 1, 1),
            TxnOp::get(self.key.clone(), None),
        ]);
        let response = self.ctx.txn(&self.kv, "queue read", txn).await?;
        let ops = response.op_responses();
        let predecessor = range(ops.first())?.first().map(|kv| kv.key().to_vec());
        let mine = range(ops.get(1))?
            .first()
            .is_some_and(|kv| kv.create_revision() == revision);
        Ok(Recheck {
            header: header(&response)?,
            mine,
            predecessor,
        })
    }

    /// Deletes our key now (a `Wait::No` miss), so a retry does not queue behind it.
    pub(crate) async fn remove(&mut self) -> Result<(), Failure> {
        if let State::Queued(revision) = self.state {
            delete_if_created_at(&self.kv, &self.ctx, &self.key, revision).await?;
            self.state = State::Absent;
        }
        Ok(())
    }

    /// Hands the key over to a held lock: it is no longer deleted on drop.
    pub(crate) fn into_held(mut self) -> Option<(Vec<u8>, Slot)> {
        self.state = State::Absent;
        let slot = self.slot.take()?;
        Some((std::mem::take(&mut self.key), slot))
    }

    /// Forgets a key that is already gone (its lease expired).
    pub(crate) fn mark_gone(&mut self) {
        self.state = State::Absent;
    }
}

/// Deletes `key` if it is still the one created at `revision`: a retried or late
/// delete never removes a newer key of the same name (etcd issue 22082's shape).
/// Returns whether it deleted.
pub(crate) async fn delete_if_created_at(
    kv: &KvClient,
    ctx: &Context,
    key: &[u8],
    revision: i64,
) -> Result<bool, Failure> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)]);
    let response = ctx.txn(kv, "release transaction", txn).await?;
    Ok(response.succeeded())
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else { return };
        let state = std::mem::replace(&mut self.state, State::Absent);
        if matches!(state, State::Absent) {
            slot.mark_clean();
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to clean up on: the slot taints its lease, so the key dies
            // with the ttl.
            return;
        };
        let (kv, ctx, key) = (
            self.kv.clone(),
            self.ctx.clone(),
            std::mem::take(&mut self.key),
        );
        runtime.spawn(async move {
            let revision = match state {
                State::Queued(revision) => Some(revision),
                State::Putting(task) => match task.await {
                    Ok(Ok(response)) => created_revision(&response),
                    Ok(Err(Failure::Other(LockError::Unavailable { .. }))) | Err(_) => None,
                    Ok(Err(_)) => {
                        slot.mark_clean();
                        return;
                    }
                },
                State::Unknown | State::Absent => None,
            };
            let Some(revision) = revision else {
                // The outcome is unknown: the slot stays unclean, so the lease is
                // not kept alive for this key's sake and it dies with the ttl.
                return;
            };
            match delete_if_created_at(&kv, &ctx, &key, revision).await {
                Ok(_) => slot.mark_clean(),
                Err(_) => tracing::debug!(key = %crate::keys::printable(&key), "cleanup of a cancelled acquire failed; the key expires with its lease"),
            }
        });
    }
}

/// The create revision of the key a put-if-absent transaction put or found.
fn created_revision(response: &TxnResponse) -> Option<i64> {
    if response.succeeded() {
        return response.header().map(|h| h.revision());
    }
    match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().map(KeyValue::create_revision),
        _ => None,
    }
}
