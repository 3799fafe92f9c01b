//! One watch the hub keeps open: what it watches, from which revision etcd
//! confirmed it, and who listens to it now.

use super::Notice;
use prost::bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Who listens to a watch.
pub(super) enum Listener {
    Subscribed(mpsc::UnboundedSender<Notice>),
    /// Nobody, since then.
    Idle(Instant),
}

/// One watch on the stream, by watch id in the hub.
pub(super) struct Entry {
    pub(super) key: Bytes,
    /// Empty for one key; else the end of the watched range.
    pub(super) range_end: Bytes,
    /// Kept for the next subscriber once its subscriber goes.
    pub(super) linger: bool,
    /// The revision after which the watch delivers every deletion, once etcd has
    /// confirmed it on the current stream.
    pub(super) start: Option<i64>,
    pub(super) listener: Listener,
    /// The latest deletion the watch delivered (its revision and key), for
    /// whoever subscribes next.
    pub(super) last_deleted: Option<(i64, Arc<[u8]>)>,
}

impl Entry {
    pub(super) fn idle_since(&self) -> Option<Instant> {
        match self.listener {
            Listener::Idle(since) => Some(since),
            Listener::Subscribed(_) => None,
        }
    }

    pub(super) fn send(&self, notice: Notice) -> bool {
        match &self.listener {
            Listener::Subscribed(notices) => notices.send(notice).is_ok(),
            Listener::Idle(_) => false,
        }
    }
}
