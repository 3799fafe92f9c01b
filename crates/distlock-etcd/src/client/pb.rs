//! The messages of etcd's v3 gRPC API that distlock sends and reads, written by
//! hand after etcd's `rpc.proto`, `kv.proto` and `v3lock.proto`: only the fields
//! used here. The tag numbers are the protocol; a field left out is skipped on
//! decoding, as protobuf skips unknown fields. The keys and values of requests
//! are shared buffers (`Bytes`): a transaction names the same key or queue in
//! several operations, and the adapter keeps the key its requests name.

use prost::bytes::Bytes;
use prost::{Message, Oneof};

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub(crate) revision: i64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub(crate) create_revision: i64,
    #[prost(int64, tag = "3")]
    pub(crate) mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub(crate) version: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub(crate) value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub(crate) lease: i64,
}

/// `mvccpb.Event`.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(message, optional, tag = "2")]
    pub(crate) kv: Option<KeyValue>,
}

/// `etcdserverpb.RangeRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct RangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub(crate) key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub(crate) limit: i64,
    #[prost(int32, tag = "5")]
    pub(crate) sort_order: i32,
    #[prost(int32, tag = "6")]
    pub(crate) sort_target: i32,
    #[prost(bool, tag = "8")]
    pub(crate) keys_only: bool,
    #[prost(bool, tag = "9")]
    pub(crate) count_only: bool,
    #[prost(int64, tag = "13")]
    pub(crate) max_create_revision: i64,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) kvs: Vec<KeyValue>,
    #[prost(int64, tag = "4")]
    pub(crate) count: i64,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct PutRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub(crate) key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) value: Bytes,
    #[prost(int64, tag = "3")]
    pub(crate) lease: i64,
    #[prost(bool, tag = "5")]
    pub(crate) ignore_value: bool,
}

/// `etcdserverpb.PutResponse` (its fields unread).
#[derive(Clone, PartialEq, Message)]
pub struct PutResponse {}

/// `etcdserverpb.DeleteRangeRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct DeleteRangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub(crate) key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) range_end: Bytes,
}

/// `etcdserverpb.DeleteRangeResponse` (its fields unread).
#[derive(Clone, PartialEq, Message)]
pub struct DeleteRangeResponse {}

/// `etcdserverpb.RequestOp`.
#[derive(Clone, PartialEq, Message)]
pub struct RequestOp {
    #[prost(oneof = "TxnOp", tags = "1, 2, 3, 4")]
    pub(crate) request: Option<TxnOp>,
}

/// One operation of a transaction (`RequestOp.request`).
#[derive(Clone, PartialEq, Oneof)]
pub enum TxnOp {
    /// A range read.
    #[prost(message, tag = "1")]
    Get(RangeRequest),
    /// A put.
    #[prost(message, tag = "2")]
    Put(PutRequest),
    /// A range delete.
    #[prost(message, tag = "3")]
    Delete(DeleteRangeRequest),
    /// A nested transaction.
    #[prost(message, tag = "4")]
    Txn(TxnRequest),
}

/// `etcdserverpb.ResponseOp`.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseOp {
    #[prost(oneof = "TxnOpResponse", tags = "1, 2, 3, 4")]
    pub(crate) response: Option<TxnOpResponse>,
}

/// The reply to one operation of a transaction (`ResponseOp.response`).
#[derive(Clone, PartialEq, Oneof)]
pub enum TxnOpResponse {
    /// To a range read.
    #[prost(message, tag = "1")]
    Get(RangeResponse),
    /// To a put.
    #[prost(message, tag = "2")]
    Put(PutResponse),
    /// To a range delete.
    #[prost(message, tag = "3")]
    Delete(DeleteRangeResponse),
    /// To a nested transaction.
    #[prost(message, tag = "4")]
    Txn(TxnResponse),
}

/// `etcdserverpb.Compare`.
#[derive(Clone, PartialEq, Message)]
pub struct Compare {
    #[prost(int32, tag = "1")]
    pub(crate) result: i32,
    #[prost(int32, tag = "2")]
    pub(crate) target: i32,
    #[prost(bytes = "bytes", tag = "3")]
    pub(crate) key: Bytes,
    #[prost(oneof = "CompareTarget", tags = "5, 7")]
    pub(crate) target_union: Option<CompareTarget>,
    #[prost(bytes = "bytes", tag = "64")]
    pub(crate) range_end: Bytes,
}

/// `Compare.target_union`, the two targets distlock compares.
#[derive(Clone, PartialEq, Oneof)]
pub enum CompareTarget {
    /// The key's create revision (target `CREATE`, 1).
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    /// The key's value (target `VALUE`, 3).
    #[prost(bytes = "bytes", tag = "7")]
    Value(Bytes),
}

/// `etcdserverpb.TxnRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub(crate) failure: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub(crate) succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub(crate) responses: Vec<ResponseOp>,
}

/// `etcdserverpb.WatchRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WatchRequest {
    #[prost(oneof = "WatchRequestUnion", tags = "1, 2")]
    pub(crate) request_union: Option<WatchRequestUnion>,
}

/// `WatchRequest.request_union`.
#[derive(Clone, PartialEq, Oneof)]
pub enum WatchRequestUnion {
    /// Creates a watch.
    #[prost(message, tag = "1")]
    Create(WatchCreateRequest),
    /// Cancels one.
    #[prost(message, tag = "2")]
    Cancel(WatchCancelRequest),
}

/// `etcdserverpb.WatchCreateRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WatchCreateRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub(crate) key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub(crate) start_revision: i64,
    /// `FilterType`: 0 no puts, 1 no deletes.
    #[prost(int32, repeated, tag = "5")]
    pub(crate) filters: Vec<i32>,
    #[prost(int64, tag = "7")]
    pub(crate) watch_id: i64,
}

/// `etcdserverpb.WatchCancelRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WatchCancelRequest {
    #[prost(int64, tag = "1")]
    pub(crate) watch_id: i64,
}

/// `etcdserverpb.WatchResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub(crate) watch_id: i64,
    #[prost(bool, tag = "3")]
    pub(crate) created: bool,
    #[prost(bool, tag = "4")]
    pub(crate) canceled: bool,
    #[prost(int64, tag = "5")]
    pub(crate) compact_revision: i64,
    #[prost(string, tag = "6")]
    pub(crate) cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub(crate) events: Vec<Event>,
}

/// `etcdserverpb.LeaseGrantRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub(crate) ttl: i64,
}

/// `etcdserverpb.LeaseGrantResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub(crate) id: i64,
    #[prost(int64, tag = "3")]
    pub(crate) ttl: i64,
    #[prost(string, tag = "4")]
    pub(crate) error: String,
}

/// `etcdserverpb.LeaseRevokeRequest`, `LeaseKeepAliveRequest` and
/// `LeaseTimeToLiveRequest` (without `keys`): a lease id in field 1.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseIdRequest {
    #[prost(int64, tag = "1")]
    pub(crate) id: i64,
}

/// `etcdserverpb.LeaseRevokeResponse` (its fields unread).
#[derive(Clone, PartialEq, Message)]
pub struct LeaseRevokeResponse {}

/// `etcdserverpb.LeaseKeepAliveResponse` and `LeaseTimeToLiveResponse`: the
/// remaining ttl (-1 or 0 once the lease is gone) in field 3.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseTtlResponse {
    #[prost(int64, tag = "3")]
    pub(crate) ttl: i64,
}

/// `etcdserverpb.LeaseStatus`.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseStatus {
    #[prost(int64, tag = "1")]
    pub(crate) id: i64,
}

/// `etcdserverpb.LeaseLeasesResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct LeaseLeasesResponse {
    #[prost(message, repeated, tag = "2")]
    pub(crate) leases: Vec<LeaseStatus>,
}

/// `etcdserverpb.AuthenticateRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) password: String,
}

/// `etcdserverpb.AuthenticateResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct AuthenticateResponse {
    #[prost(string, tag = "2")]
    pub(crate) token: String,
}

/// `etcdserverpb.MemberListRequest` and `StatusRequest`: no fields used.
#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

/// `etcdserverpb.Member`.
#[derive(Clone, PartialEq, Message)]
pub struct Member {
    #[prost(string, repeated, tag = "4")]
    pub(crate) client_urls: Vec<String>,
}

/// `etcdserverpb.MemberListResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct MemberListResponse {
    #[prost(message, repeated, tag = "2")]
    pub(crate) members: Vec<Member>,
}

/// `etcdserverpb.StatusResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct StatusResponse {
    #[prost(string, tag = "2")]
    pub(crate) version: String,
    #[prost(int64, tag = "9")]
    pub(crate) db_size_in_use: i64,
}

/// `v3lockpb.LockRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct LockRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) name: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub(crate) lease: i64,
}

/// `v3lockpb.LockResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct LockResponse {
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) key: Vec<u8>,
}

/// `v3lockpb.UnlockRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct UnlockRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
}
