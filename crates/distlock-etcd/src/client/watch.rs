//! Watches (`etcdserverpb.Watch`): one bidirectional stream carries the create
//! and cancel requests of many watches and their events.

use super::pb::{
    Event, KeyValue, ResponseHeader, WatchCancelRequest, WatchCreateRequest, WatchRequest,
    WatchRequestUnion, WatchResponse,
};
use super::{Conn, Error, Result};
use prost::bytes::Bytes;
use tokio::sync::mpsc;
use tonic::Streaming;

/// Opens watch streams; clones share the connection.
#[derive(Debug, Clone)]
pub struct WatchClient {
    conn: Conn,
}

impl WatchClient {
    pub(super) fn new(conn: Conn) -> Self {
        WatchClient { conn }
    }

    /// Opens a stream with a first watch of `key`.
    pub async fn watch(
        &self,
        key: impl Into<Bytes>,
        options: Option<WatchOptions>,
    ) -> Result<(WatchRequestSender, WatchResponseStream)> {
        let first = options.unwrap_or_default().request(key.into());
        let path = "/etcdserverpb.Watch/Watch";
        let (sender, stream) = self.conn.stream(path, first).await?;
        Ok((WatchRequestSender(sender), WatchResponseStream(stream)))
    }
}

/// Events a watch leaves out (`WatchCreateRequest.FilterType`).
#[derive(Debug, Clone, Copy)]
pub enum WatchFilterType {
    /// Puts.
    NoPut = 0,
}

/// A watch's options; the key is given with the request.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions(WatchCreateRequest);

impl WatchOptions {
    /// Every change of the key from the current revision, under an id etcd picks.
    pub fn new() -> Self {
        Self::default()
    }

    /// The watch's id on its stream (0: etcd picks one).
    pub fn with_watch_id(mut self, id: i64) -> Self {
        self.0.watch_id = id;
        self
    }

    /// Leaves out these events.
    pub fn with_filters(mut self, filters: impl IntoIterator<Item = WatchFilterType>) -> Self {
        self.0.filters = filters.into_iter().map(|f| f as i32).collect();
        self
    }

    /// Every key from the key up to `end` (excluded).
    pub fn with_range(mut self, end: impl Into<Bytes>) -> Self {
        self.0.range_end = end.into();
        self
    }

    fn request(mut self, key: Bytes) -> WatchRequest {
        self.0.key = key;
        WatchRequest {
            request_union: Some(WatchRequestUnion::Create(self.0)),
        }
    }
}

/// Sends create and cancel requests on a watch stream.
#[derive(Debug)]
pub struct WatchRequestSender(mpsc::Sender<WatchRequest>);

impl WatchRequestSender {
    /// Adds a watch of `key` to the stream.
    pub async fn watch(
        &mut self,
        key: impl Into<Bytes>,
        options: Option<WatchOptions>,
    ) -> Result<()> {
        let request = options.unwrap_or_default().request(key.into());
        self.send(request).await
    }

    /// Cancels the watch `watch_id`.
    pub async fn cancel(&mut self, watch_id: i64) -> Result<()> {
        let cancel = WatchCancelRequest { watch_id };
        let request = WatchRequest {
            request_union: Some(WatchRequestUnion::Cancel(cancel)),
        };
        self.send(request).await
    }

    async fn send(&mut self, request: WatchRequest) -> Result<()> {
        self.0
            .send(request)
            .await
            .map_err(|_| Error::StreamEnded("watch"))
    }
}

/// The replies on a watch stream.
#[derive(Debug)]
pub struct WatchResponseStream(Streaming<WatchResponse>);

impl WatchResponseStream {
    /// The next reply; `None` when the stream ended.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>> {
        Ok(self.0.message().await?)
    }
}

impl WatchResponse {
    /// The reply's header.
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }

    /// The watch this reply is about.
    pub fn watch_id(&self) -> i64 {
        self.watch_id
    }

    /// Whether it confirms the watch's creation.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether etcd ended the watch.
    pub fn canceled(&self) -> bool {
        self.canceled
    }

    /// For a watch ended because its start was compacted: the oldest revision left.
    pub fn compact_revision(&self) -> i64 {
        self.compact_revision
    }

    /// Why etcd ended the watch.
    pub fn cancel_reason(&self) -> &str {
        &self.cancel_reason
    }

    /// The changes.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

impl Event {
    /// The key after the change (for a deletion: its key and the deleting
    /// revision as `mod_revision`, version 0).
    pub fn kv(&self) -> Option<&KeyValue> {
        self.kv.as_ref()
    }
}
