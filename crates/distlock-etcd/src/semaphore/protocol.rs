//! The semaphore's requests, in the order an acquire sends them, one
//! transaction each:
//!
//! 1. [`enqueue`]: if every waiting and permit key carries our limit, put our
//!    key (carrying it too) in the queue on our lease and read the keys ahead
//!    of ours and the slots in use. Otherwise, if nobody waits or holds, do the
//!    same, in the same transaction; else read why: the limit another key
//!    carries.
//! 2. A waiter watches the key before its own; the first waiter watches the
//!    slots. After each wake it [`look`]s again.
//! 3. [`claim`]: the first waiter with a free slot trades its queue key for the
//!    permit key `slots/<n>` on the same lease, in one transaction that fails if
//!    the slot was taken or the queue key is gone.
//!
//! Release and every undo delete by create revision (the lock's
//! `delete_if_created_at`).

use crate::client::{
    Compare, CompareOp, GetOptions, KeyValue, KvClient, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use crate::error::{BACKEND, Failure, protocol};
use crate::keys::{LIMIT_KEY, QUEUE_DIR, SLOTS_DIR, prefix_end, printable};
use crate::protocol::{get_newest, header, range};
use crate::rpc::Rpc;
use distlock_core::LockError;
use prost::bytes::Bytes;

/// The keys of one semaphore.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `<range>limit`: where the previous release kept the limit, without a
    /// lease; deleted whenever the semaphore is found unused.
    pub legacy_limit: Vec<u8>,
    /// `<range>queue/`: the waiting keys.
    pub queue: Vec<u8>,
    /// `<range>slots/`: the permits.
    pub slots: Vec<u8>,
}

impl Layout {
    /// The keys under a semaphore's range (`keys::semaphore_prefix`).
    pub fn new(range: &[u8]) -> Self {
        Layout {
            legacy_limit: [range, LIMIT_KEY].concat(),
            queue: [range, QUEUE_DIR].concat(),
            slots: [range, SLOTS_DIR].concat(),
        }
    }

    /// The permit key of `slot`.
    pub fn permit(&self, slot: u32) -> Vec<u8> {
        [self.slots.as_slice(), slot.to_string().as_bytes()].concat()
    }

    /// The slot a permit key names, if it is one of ours.
    pub fn slot_of(&self, key: &[u8]) -> Option<u32> {
        let number = key.strip_prefix(self.slots.as_slice())?;
        std::str::from_utf8(number).ok()?.parse().ok()
    }

    /// The waiting and permit keys: `queue/` and `slots/` are next to each
    /// other in the range (`limit` sorts before both), so one range holds both.
    fn in_use(&self) -> (Vec<u8>, Vec<u8>) {
        (self.queue.clone(), prefix_end(&self.slots))
    }

    /// True when every waiting and permit key carries `limit`; false when there
    /// is none (etcd fails a value comparison on an empty range).
    fn all_carry(&self, limit: u32) -> Compare {
        let (start, end) = self.in_use();
        Compare::value(start, CompareOp::Equal, limit.to_string()).with_range(end)
    }

    /// True when nobody waits or holds.
    fn unused(&self) -> Compare {
        let (start, end) = self.in_use();
        Compare::create_revision(start, CompareOp::Equal, 0).with_range(end)
    }
}

/// What a waiter knows after [`enqueue`] or [`look`].
#[derive(Debug)]
pub(crate) struct Look {
    /// The store revision of the read.
    pub header: i64,
    /// Our key still exists with its create revision.
    pub mine: bool,
    /// The waiting key just before ours; `None` when ours is the first.
    pub predecessor: Option<Vec<u8>>,
    /// How many waiting keys are older than ours.
    pub ahead: usize,
    /// The slots in use.
    pub taken: Vec<u32>,
}

/// Why [`enqueue`] did not put our key.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Our key was there already (an earlier reply was lost): it is adopted,
    /// created at this revision.
    Adopted(i64),
    /// A waiting or permit key carries another limit: that key and its
    /// value. `None` when nobody waited or held any more at the second
    /// comparison.
    Limit(Option<(Vec<u8>, Vec<u8>)>),
}

fn keys_only(dir: &[u8]) -> GetOptions {
    GetOptions::new()
        .with_range(prefix_end(dir))
        .with_keys_only()
}

/// Step 1. The reply is read with [`enqueued`]. Its failure branch reads our
/// key first, as the lock's enqueue does, then runs step 1 again as one
/// transaction if nobody waits or holds (the first acquire of a name, or one
/// after every client left, maybe with a new limit), which also deletes a
/// limit key the previous release left: so a new limit costs no extra round
/// trip, and the limit lives only in keys on leases.
pub(crate) async fn enqueue(
    rpc: Rpc,
    kv: KvClient,
    layout: Layout,
    key: Bytes,
    lease: i64,
    limit: u32,
) -> Result<TxnResponse, Failure> {
    let absent = Compare::create_revision(key.clone(), CompareOp::Equal, 0);
    let put_and_look = |key: &Bytes| {
        [
            TxnOp::put(
                key.clone(),
                limit.to_string(),
                Some(PutOptions::new().with_lease(lease)),
            ),
            // Ours is the newest key, then the older ones, newest first (as
            // many as could be served before us: more wait anyway).
            TxnOp::get(
                layout.queue.clone(),
                Some(get_newest(&layout.queue, 0, i64::from(limit) + 1)),
            ),
            TxnOp::get(layout.slots.clone(), Some(keys_only(&layout.slots))),
        ]
    };
    let [put, newest, slots] = put_and_look(&key);
    let (start, end) = layout.in_use();
    let adopt = Txn::new()
        .when([layout.unused(), absent.clone()])
        .and_then([
            TxnOp::delete(layout.legacy_limit.clone()),
            put,
            newest,
            slots,
        ])
        .or_else([TxnOp::get(
            start,
            Some(GetOptions::new().with_range(end).with_limit(1)),
        )]);
    let txn = Txn::new()
        .when([layout.all_carry(limit), absent])
        .and_then(put_and_look(&key))
        .or_else([TxnOp::get(key, None), TxnOp::Txn(adopt)]);
    rpc.txn(&kv, "semaphore enqueue", txn).await
}

/// What an [`enqueue`] reply says: our key's create revision and the first
/// look, or why nothing was put.
pub(crate) fn enqueued(
    layout: &Layout,
    response: &TxnResponse,
) -> Result<Result<(i64, Look), Refused>, Failure> {
    let header = header(response)?;
    let look = |ops: &TxnResponse, first: usize| -> Result<Look, Failure> {
        let newest = range(ops.op_response(first))?;
        Ok(Look {
            header,
            mine: true,
            predecessor: newest.get(1).map(|kv| kv.key().to_vec()),
            ahead: newest.len().saturating_sub(1),
            taken: slots(layout, range(ops.op_response(first + 1))?),
        })
    };
    if response.succeeded() {
        return Ok(Ok((header, look(response, 1)?)));
    }
    if let Some(mine) = range(response.op_response(0))?.first() {
        return Ok(Err(Refused::Adopted(mine.create_revision())));
    }
    let Some(TxnOpResponse::Txn(adopt)) = response.op_response(1) else {
        return Err(protocol("the semaphore enqueue did not run its limit transaction").into());
    };
    if adopt.succeeded() {
        // After the old limit key's delete and our key's put: the look.
        return Ok(Ok((header, look(adopt, 2)?)));
    }
    let stored = range(adopt.op_response(0))?.first();
    let stored = stored.map(|kv| (kv.key().to_vec(), kv.value().to_vec()));
    Ok(Err(Refused::Limit(stored)))
}

/// Step 2, after a wake-up: the waiting key just before ours (created at
/// `revision`), whether ours still exists, and the slots in use.
pub(crate) async fn look(
    rpc: &Rpc,
    kv: &KvClient,
    layout: &Layout,
    key: &Bytes,
    revision: i64,
    limit: u32,
) -> Result<Look, Failure> {
    // The older waiting keys, newest first, up to `limit` of them: with that
    // many ahead, no slot can be ours yet.
    let older = get_newest(&layout.queue, revision - 1, i64::from(limit));
    let txn = Txn::new().and_then([
        TxnOp::get(layout.queue.clone(), Some(older)),
        TxnOp::get(key.clone(), None),
        TxnOp::get(layout.slots.clone(), Some(keys_only(&layout.slots))),
    ]);
    let response = rpc.txn(kv, "semaphore read", txn).await?;
    let op = |index| response.op_response(index);
    Ok(Look {
        header: header(&response)?,
        predecessor: range(op(0))?.first().map(|kv| kv.key().to_vec()),
        ahead: range(op(0))?.len(),
        mine: range(op(1))?
            .first()
            .is_some_and(|kv| kv.create_revision() == revision),
        taken: slots(layout, range(op(2))?),
    })
}

/// Step 3: deletes our queue key (created at `revision`) and creates `permit`
/// on `lease`, carrying `limit`, if the permit key is free and our key still
/// ours. On success the permit key's create revision is the reply's header
/// revision.
pub(crate) async fn claim(
    rpc: Rpc,
    kv: KvClient,
    (key, revision): (Bytes, i64),
    permit: Bytes,
    lease: i64,
    limit: u32,
) -> Result<TxnResponse, Failure> {
    let txn = Txn::new()
        .when([
            Compare::create_revision(key.clone(), CompareOp::Equal, revision),
            Compare::create_revision(permit.clone(), CompareOp::Equal, 0),
        ])
        .and_then([
            TxnOp::delete(key),
            TxnOp::put(
                permit,
                limit.to_string(),
                Some(PutOptions::new().with_lease(lease)),
            ),
        ]);
    rpc.txn(&kv, "semaphore claim", txn).await
}

/// The permits of a semaphore, with their leases and create revisions.
pub(crate) async fn permits(
    rpc: &Rpc,
    kv: &KvClient,
    layout: &Layout,
) -> Result<Vec<(u32, KeyValue)>, Failure> {
    let found = rpc
        .retrying("semaphore permits read", || {
            let (kv, options) = (kv.clone(), keys_only(&layout.slots));
            let slots = layout.slots.clone();
            async move { kv.get(slots, Some(options)).await }
        })
        .await?;
    Ok((found.kvs().iter())
        .filter_map(|kv| Some((layout.slot_of(kv.key())?, kv.clone())))
        .collect())
}

fn slots(layout: &Layout, keys: &[KeyValue]) -> Vec<u32> {
    keys.iter()
        .filter_map(|kv| layout.slot_of(kv.key()))
        .collect()
}

/// The limit the waiting or permit `key` carries, or an error saying why it
/// carries none: a client of the previous release (which kept the limit in a
/// key of its own) waits or holds, or the key was not written by distlock.
pub(crate) fn parse_limit(key: &[u8], stored: &[u8]) -> Result<u32, Failure> {
    let parsed = std::str::from_utf8(stored)
        .ok()
        .and_then(|text| text.parse().ok());
    parsed.ok_or_else(|| {
        let why = if stored.is_empty() {
            "carries no limit: a client of the previous distlock release (which kept the limit \
             in a `limit` key) waits or holds; clients of the two releases take turns on a \
             semaphore name rather than share it, so finish the rolling upgrade"
                .to_owned()
        } else {
            format!(
                "carries {:?}, not a number of permits: it was not written by distlock; delete \
                 it",
                String::from_utf8_lossy(stored)
            )
        };
        LockError::backend(
            BACKEND,
            format!("the semaphore key {} {why}", printable(key)),
        )
        .into()
    })
}
