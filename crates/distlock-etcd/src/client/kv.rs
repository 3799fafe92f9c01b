//! Keys: `Range`, `Put`, `DeleteRange` and `Txn` of `etcdserverpb.KV`, the
//! builders for their requests, and what their replies say.

use super::pb::{
    Compare, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, KeyValue, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseHeader, TxnOp, TxnOpResponse,
    TxnRequest, TxnResponse,
};
use super::{Conn, Result};
use crate::keys::prefix_end;
use prost::bytes::Bytes;

/// Reads and writes keys; clones share the connection.
#[derive(Debug, Clone)]
pub struct KvClient {
    conn: Conn,
}

impl KvClient {
    pub(super) fn new(conn: Conn) -> Self {
        KvClient { conn }
    }

    /// Reads `key` (or the range the options give), linearizably.
    pub async fn get(
        &self,
        key: impl Into<Bytes>,
        options: Option<GetOptions>,
    ) -> Result<RangeResponse> {
        let request = options.unwrap_or_default().request(key.into());
        self.conn.unary("/etcdserverpb.KV/Range", &request).await
    }

    /// Puts `value` at `key`.
    pub async fn put(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        options: Option<PutOptions>,
    ) -> Result<PutResponse> {
        let request = options
            .unwrap_or_default()
            .request(key.into(), value.into());
        self.conn.unary("/etcdserverpb.KV/Put", &request).await
    }

    /// Deletes `key`.
    pub async fn delete(&self, key: impl Into<Bytes>) -> Result<DeleteRangeResponse> {
        let request = delete_request(key.into());
        self.conn
            .unary("/etcdserverpb.KV/DeleteRange", &request)
            .await
    }

    /// Runs a transaction.
    pub async fn txn(&self, txn: &Txn) -> Result<TxnResponse> {
        self.conn.unary("/etcdserverpb.KV/Txn", txn).await
    }
}

fn delete_request(key: Bytes) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key,
        range_end: Bytes::new(),
    }
}

/// What a range read sorts by (`RangeRequest.SortTarget`).
#[derive(Debug, Clone, Copy)]
pub enum SortTarget {
    /// The create revision.
    Create = 2,
}

/// Which end of a sorted range comes first (`RangeRequest.SortOrder`).
#[derive(Debug, Clone, Copy)]
pub enum SortOrder {
    /// Lowest first.
    Ascend = 1,
    /// Highest first.
    Descend = 2,
}

/// A range read's options; the key is given with the request.
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    request: RangeRequest,
    prefix: bool,
}

impl GetOptions {
    /// The key alone, all fields, unsorted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key from the key up to `end` (excluded).
    pub fn with_range(mut self, end: impl Into<Bytes>) -> Self {
        self.request.range_end = end.into();
        self
    }

    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Sorted by `target` in `order`.
    pub fn with_sort(mut self, target: SortTarget, order: SortOrder) -> Self {
        self.request.sort_target = target as i32;
        self.request.sort_order = order as i32;
        self
    }

    /// At most `limit` keys (0: all).
    pub fn with_limit(mut self, limit: i64) -> Self {
        self.request.limit = limit;
        self
    }

    /// Keys without their values.
    pub fn with_keys_only(mut self) -> Self {
        self.request.keys_only = true;
        self
    }

    /// Only the number of keys.
    pub fn with_count_only(mut self) -> Self {
        self.request.count_only = true;
        self
    }

    /// Only keys created at or before `revision` (0: any).
    pub fn with_max_create_revision(mut self, revision: i64) -> Self {
        self.request.max_create_revision = revision;
        self
    }

    fn request(mut self, key: Bytes) -> RangeRequest {
        if self.prefix {
            self.request.range_end = prefix_end(&key).into();
        }
        self.request.key = key;
        self.request
    }
}

/// A put's options.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    lease: i64,
    ignore_value: bool,
}

impl PutOptions {
    /// A key without a lease.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key is deleted when lease `id` ends.
    pub fn with_lease(mut self, id: i64) -> Self {
        self.lease = id;
        self
    }

    /// Keeps the key's value (the put's own must be empty): a put that only
    /// moves the key to another lease.
    pub fn with_ignore_value(mut self) -> Self {
        self.ignore_value = true;
        self
    }

    fn request(self, key: Bytes, value: Bytes) -> PutRequest {
        PutRequest {
            key,
            value,
            lease: self.lease,
            ignore_value: self.ignore_value,
        }
    }
}

/// How a [`Compare`] compares (`Compare.CompareResult`).
#[derive(Debug, Clone, Copy)]
pub enum CompareOp {
    /// Equal.
    Equal = 0,
}

impl Compare {
    /// Whether `key`'s create revision (0: absent) compares as `op` to `revision`.
    pub fn create_revision(key: impl Into<Bytes>, op: CompareOp, revision: i64) -> Self {
        Compare {
            result: op as i32,
            target: 1,
            key: key.into(),
            target_union: Some(CompareTarget::CreateRevision(revision)),
            range_end: Bytes::new(),
        }
    }

    /// Whether `key`'s value compares as `op` to `value`.
    pub fn value(key: impl Into<Bytes>, op: CompareOp, value: impl Into<Bytes>) -> Self {
        Compare {
            result: op as i32,
            target: 3,
            key: key.into(),
            target_union: Some(CompareTarget::Value(value.into())),
            range_end: Bytes::new(),
        }
    }

    /// Compares every key from the key up to `end` (excluded): all must match.
    pub fn with_range(mut self, end: impl Into<Bytes>) -> Self {
        self.range_end = end.into();
        self
    }
}

/// A transaction: if every comparison holds, the success operations run, else
/// the failure ones.
pub type Txn = TxnRequest;

impl TxnRequest {
    /// No comparisons, no operations.
    pub fn new() -> Self {
        Self::default()
    }

    /// The comparisons.
    pub fn when(mut self, compares: impl Into<Vec<Compare>>) -> Self {
        self.compare = compares.into();
        self
    }

    /// What runs if every comparison holds.
    pub fn and_then(mut self, ops: impl Into<Vec<TxnOp>>) -> Self {
        self.success = request_ops(ops);
        self
    }

    /// What runs otherwise.
    pub fn or_else(mut self, ops: impl Into<Vec<TxnOp>>) -> Self {
        self.failure = request_ops(ops);
        self
    }
}

fn request_ops(ops: impl Into<Vec<TxnOp>>) -> Vec<RequestOp> {
    let ops: Vec<TxnOp> = ops.into();
    ops.into_iter()
        .map(|op| RequestOp { request: Some(op) })
        .collect()
}

impl TxnOp {
    /// Reads `key` (or the range the options give).
    pub fn get(key: impl Into<Bytes>, options: Option<GetOptions>) -> Self {
        TxnOp::Get(options.unwrap_or_default().request(key.into()))
    }

    /// Puts `value` at `key`.
    pub fn put(
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        options: Option<PutOptions>,
    ) -> Self {
        TxnOp::Put(
            options
                .unwrap_or_default()
                .request(key.into(), value.into()),
        )
    }

    /// Deletes `key`.
    pub fn delete(key: impl Into<Bytes>) -> Self {
        TxnOp::Delete(delete_request(key.into()))
    }
}

impl ResponseHeader {
    /// The store's revision when the request ran.
    pub fn revision(&self) -> i64 {
        self.revision
    }
}

impl KeyValue {
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value (empty when read keys-only).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The revision that created the key.
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The revision that last changed the key.
    pub fn mod_revision(&self) -> i64 {
        self.mod_revision
    }

    /// Changes since the key was created (0: deleted).
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The key's lease (0: none).
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

impl RangeResponse {
    /// The reply's header.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// The keys read.
    pub fn kvs(&self) -> &[KeyValue] {
        &self.kvs
    }

    /// How many keys the range holds.
    pub fn count(&self) -> i64 {
        self.count
    }
}

impl TxnResponse {
    /// The reply's header.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// Whether every comparison held.
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }

    /// The reply of the operation at `index` among those that ran.
    pub fn op_response(&self, index: usize) -> Option<&TxnOpResponse> {
        self.responses.get(index)?.response.as_ref()
    }
}
