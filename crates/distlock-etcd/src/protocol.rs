//! The lock protocol's requests, in the order an acquire sends them: etcd's own
//! lock (Go's `concurrency.Mutex`), one transaction per step.
//!
//! 1. [`enqueue`]: put our key if absent, attached to the lease, and read the
//!    queue's oldest key (the holder) and the key just before ours.
//! 2. The waiter watches its predecessor's deletion from the current revision
//!    (`watch.rs`) and [`recheck`]s once etcd has created the watch (the
//!    predecessor may have gone meanwhile) and again after the deletion: the key
//!    before ours now, and our own key (a lease can die while queued).
//! 3. Renewal checks the key with [`still_created_at`]; release and every undo
//!    [`delete_if_created_at`], so a late or retried delete never removes a newer
//!    key of the same name. A minimum hold moves the key to a lease of its own
//!    with [`reattach`], guarded the same way.
//!
//! [`read_created`] serves the held key's loss watch when that watch started
//! after the key was last read; [`oldest`], [`keys_under`] and
//! [`delete_found`] serve the operator's inspection, [`put_if_absent`] and [`delete`] the benchmarks' floor.

use crate::client::{
    Compare, CompareOp, GetOptions, KeyValue, KvClient, PutOptions, RangeResponse, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use crate::error::{Failure, protocol};
use crate::keys::prefix_end;
use crate::rpc::Rpc;
use prost::bytes::Bytes;

/// What the enqueue transaction saw.
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

/// The queue, oldest first, first key only (Go's `WithFirstCreate`).
fn get_holder(queue: &[u8]) -> GetOptions {
    GetOptions::new()
        .with_range(prefix_end(queue))
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only()
}

/// The newest `limit` keys of the queue created at or before `max_revision` (0: any).
pub(crate) fn get_newest(queue: &[u8], max_revision: i64, limit: i64) -> GetOptions {
    GetOptions::new()
        .with_range(prefix_end(queue))
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_max_create_revision(max_revision)
        .with_limit(limit)
        .with_keys_only()
}

pub(crate) fn range(response: Option<&TxnOpResponse>) -> Result<&[KeyValue], Failure> {
    match response {
        Some(TxnOpResponse::Get(get)) => Ok(get.kvs()),
        _ => Err(protocol("a transaction did not return the ranges it was asked for").into()),
    }
}

pub(crate) fn header(response: &TxnResponse) -> Result<i64, Failure> {
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| protocol("a transaction reply without a header").into())
}

/// Step 1: puts `key` in `queue` if absent, attached to `lease`, and reads the
/// holder and our predecessor, in one transaction. If the key already exists
/// (only a lost earlier reply can do that) it is adopted, as Go's `Mutex` does.
/// A fresh key is the newest, so one read of the two newest keys tells both:
/// the other one is our predecessor, and with none we are the oldest.
/// `value` is empty for a lock and the proposal for an election, as Go's
/// `Mutex` and `Election` write them. Read the reply with [`first_look`].
pub(crate) async fn enqueue(
    rpc: Rpc,
    kv: KvClient,
    queue: Bytes,
    key: Bytes,
    lease: i64,
    value: Bytes,
) -> Result<TxnResponse, Failure> {
    let holder = get_holder(&queue);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            ),
            TxnOp::get(queue.clone(), Some(get_newest(&queue, 0, 2))),
        ])
        .or_else([TxnOp::get(key, None), TxnOp::get(queue, Some(holder))]);
    rpc.txn(&kv, "acquire transaction", txn).await
}

/// What an [`enqueue`] reply says.
pub(crate) fn first_look(response: &TxnResponse) -> Result<FirstLook, Failure> {
    let header = header(response)?;
    let op = |index| response.op_response(index);
    if response.succeeded() {
        let newest = range(op(1))?;
        if newest.first().map(KeyValue::create_revision) != Some(header) {
            return Err(protocol("the queue read did not show the key the transaction put").into());
        }
        let predecessor = newest.get(1).map(|kv| kv.key().to_vec());
        return Ok(FirstLook {
            revision: header,
            header,
            holder: predecessor.is_none(),
            predecessor,
        });
    }
    let mine = range(op(0))?
        .first()
        .ok_or_else(|| Failure::from(protocol("our key vanished inside a transaction")))?;
    let holder = range(op(1))?.first().map(KeyValue::create_revision);
    Ok(FirstLook {
        revision: mine.create_revision(),
        header,
        holder: holder == Some(mine.create_revision()),
        predecessor: None,
    })
}

/// The create revision of the key an [`enqueue`] put or found.
/// A failure branch reads our key first; if it then runs a transaction of its
/// own (the semaphore's, which may store the limit and put our key), that
/// transaction's success means our key was put at the reply's revision.
pub(crate) fn enqueued_revision(response: &TxnResponse) -> Option<i64> {
    if response.succeeded() {
        return response.header().map(|h| h.revision());
    }
    match (response.op_response(0), response.op_response(1)) {
        (Some(TxnOpResponse::Get(get)), _) if !get.kvs().is_empty() => {
            get.kvs().first().map(KeyValue::create_revision)
        }
        (_, Some(TxnOpResponse::Txn(nested))) if nested.succeeded() => {
            response.header().map(|h| h.revision())
        }
        _ => None,
    }
}

/// Step 2, after a wake-up: reads the key just before ours and our own key
/// (created at `revision`) in one transaction.
pub(crate) async fn recheck(
    rpc: &Rpc,
    kv: &KvClient,
    queue: &[u8],
    key: &Bytes,
    revision: i64,
) -> Result<Recheck, Failure> {
    let newest = get_newest(queue, revision - 1, 1);
    let txn = Txn::new().and_then([
        TxnOp::get(Bytes::copy_from_slice(queue), Some(newest)),
        TxnOp::get(key.clone(), None),
    ]);
    let response = rpc.txn(kv, "queue read", txn).await?;
    let predecessor = range(response.op_response(0))?
        .first()
        .map(|kv| kv.key().to_vec());
    let mine = range(response.op_response(1))?
        .first()
        .is_some_and(|kv| kv.create_revision() == revision);
    Ok(Recheck {
        header: header(&response)?,
        mine,
        predecessor,
    })
}

/// Renewal: whether `key` still is the one created at `revision`.
pub(crate) async fn still_created_at(
    rpc: &Rpc,
    kv: &KvClient,
    key: &Bytes,
    revision: i64,
) -> Result<bool, Failure> {
    let txn = Txn::new().when([Compare::create_revision(
        key.clone(),
        CompareOp::Equal,
        revision,
    )]);
    Ok(rpc.txn(kv, "renew check", txn).await?.succeeded())
}

/// A minimum hold's move (`backend/own_lease.rs`): attaches `key` to `lease`
/// if it is still the one created at `revision`, keeping its value and its
/// create revision (the token). Returns whether it moved.
pub(crate) async fn reattach(
    rpc: &Rpc,
    kv: &KvClient,
    key: &Bytes,
    revision: i64,
    lease: i64,
) -> Result<bool, Failure> {
    let keep = PutOptions::new().with_lease(lease).with_ignore_value();
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            revision,
        )])
        .and_then([TxnOp::put(key.clone(), "", Some(keep))]);
    Ok(rpc.txn(kv, "lease move", txn).await?.succeeded())
}

/// Release, and every undo: deletes `key` if it is still the one created at
/// `revision`, so a retried or late delete never removes a newer key of the same
/// name (etcd issue 22082's shape). Returns whether it deleted.
pub(crate) async fn delete_if_created_at(
    rpc: &Rpc,
    kv: &KvClient,
    key: &Bytes,
    revision: i64,
) -> Result<bool, Failure> {
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            revision,
        )])
        .and_then([TxnOp::delete(key.clone())]);
    Ok(rpc.txn(kv, "release transaction", txn).await?.succeeded())
}

/// An operator's force-unlock: [`delete_if_created_at`] of a key as it was
/// read (a holder, a permit, a share).
pub(crate) async fn delete_found(
    rpc: &Rpc,
    kv: &KvClient,
    found: &KeyValue,
) -> Result<bool, Failure> {
    let key = Bytes::copy_from_slice(found.key());
    delete_if_created_at(rpc, kv, &key, found.create_revision()).await
}

/// `key`'s create revision now (`None` when absent) and the store revision of
/// the read.
pub(crate) async fn read_created(
    rpc: &Rpc,
    kv: &KvClient,
    key: &Bytes,
) -> Result<(Option<i64>, Option<i64>), Failure> {
    let found = rpc
        .retrying("held key read", || kv.get(key.clone(), None))
        .await?;
    Ok((
        found.kvs().first().map(KeyValue::create_revision),
        found.header().map(|h| h.revision()),
    ))
}

/// The holder of a lock or the leader of an election: `queue`'s oldest key
/// with its value (a lock's holder metadata, an election's proposal, as Go's
/// `Election.Leader` reads it).
pub(crate) async fn leader(
    rpc: &Rpc,
    kv: &KvClient,
    queue: &[u8],
) -> Result<Option<KeyValue>, Failure> {
    let options = GetOptions::new()
        .with_range(prefix_end(queue))
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let queue = Bytes::copy_from_slice(queue);
    let found = rpc
        .retrying("leader read", || {
            kv.get(queue.clone(), Some(options.clone()))
        })
        .await?;
    Ok(found.kvs().first().cloned())
}

/// Every key starting with `prefix` (keys only), oldest first.
pub(crate) async fn keys_under(
    rpc: &Rpc,
    kv: &KvClient,
    prefix: &[u8],
) -> Result<Vec<KeyValue>, Failure> {
    let options = GetOptions::new()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only();
    let found = read_under(rpc, kv, prefix, "key range read", options).await?;
    Ok(found.kvs().to_vec())
}

/// How many keys start with `prefix`, read as a count alone.
pub(crate) async fn count_under(rpc: &Rpc, kv: &KvClient, prefix: &[u8]) -> Result<i64, Failure> {
    let options = GetOptions::new().with_count_only();
    let found = read_under(rpc, kv, prefix, "key count", options).await?;
    Ok(found.count())
}

/// One read, with `options`, of the keys starting with `prefix`.
async fn read_under(
    rpc: &Rpc,
    kv: &KvClient,
    prefix: &[u8],
    what: &'static str,
    options: GetOptions,
) -> Result<RangeResponse, Failure> {
    let options = options.with_range(prefix_end(prefix));
    // etcd has no empty key: a range from `\0` starts at the first key.
    let start = if prefix.is_empty() {
        Bytes::from_static(&[0])
    } else {
        Bytes::copy_from_slice(prefix)
    };
    rpc.retrying(what, || kv.get(start.clone(), Some(options.clone())))
        .await
}

/// The benchmarks' floor, first half: puts `key` if absent, attached to
/// `lease`, and nothing else (no queue read). Returns whether it put.
pub(crate) async fn put_if_absent(
    rpc: &Rpc,
    kv: &KvClient,
    key: &Bytes,
    lease: i64,
) -> Result<bool, Failure> {
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            "",
            Some(PutOptions::new().with_lease(lease)),
        )]);
    Ok(rpc.txn(kv, "floor put", txn).await?.succeeded())
}

/// The benchmarks' floor, second half: a plain `Delete` of `key`.
pub(crate) async fn delete(rpc: &Rpc, kv: &KvClient, key: &Bytes) -> Result<(), Failure> {
    rpc.retrying("floor delete", || kv.delete(key.clone()))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{PutResponse, ResponseHeader, ResponseOp};

    fn kv(key: &str, create_revision: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            create_revision,
            ..KeyValue::default()
        }
    }

    /// The reply to an enqueue that put our key at `revision` and read `newest`.
    fn put_reply(revision: i64, newest: Vec<KeyValue>) -> TxnResponse {
        let op = |response| ResponseOp {
            response: Some(response),
        };
        TxnResponse {
            header: Some(ResponseHeader { revision }),
            succeeded: true,
            responses: vec![
                op(TxnOpResponse::Put(PutResponse {})),
                op(TxnOpResponse::Get(RangeResponse {
                    kvs: newest,
                    ..RangeResponse::default()
                })),
            ],
        }
    }

    #[test]
    fn a_fresh_key_holds_when_no_key_is_older() {
        let alone = first_look(&put_reply(9, vec![kv("q/a", 9)])).unwrap();
        assert!(alone.holder && alone.predecessor.is_none() && alone.revision == 9);
        let behind = first_look(&put_reply(9, vec![kv("q/a", 9), kv("q/b", 4)])).unwrap();
        assert!(!behind.holder && behind.predecessor.as_deref() == Some(&b"q/b"[..]));
        // A read that does not show the key the transaction put is not believed.
        assert!(first_look(&put_reply(9, Vec::new())).is_err());
        assert!(first_look(&put_reply(9, vec![kv("q/b", 4)])).is_err());
    }
}
