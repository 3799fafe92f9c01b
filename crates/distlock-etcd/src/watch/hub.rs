//! The task that owns a client's watch stream: it opens the stream with the
//! first watch, creates and cancels watches as messages on it, hands each
//! response to its subscriber, and reopens the stream when it breaks.
//!
//! A watch whose subscriber has gone is kept for [`LINGER`] (at most
//! [`MAX_IDLE`] of them) and handed to the next subscriber of the same key. A
//! client contending in a loop watches the same few keys over and over (its own
//! key, the key of whoever queues before it), so most waits reuse a watch etcd
//! has long had in its synced set instead of creating one, which etcd may put on
//! its catch-up path when a write commits at the same moment.

use super::entry::{Entry, Listener};
use super::{Command, Counts, Notice};
use crate::client::{
    WatchClient, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use crate::error::Failure;
use crate::rpc::Rpc;
use distlock_core::toolkit::Backoff;
use prost::bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::time::sleep_until;

const RECONNECT_DELAY: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(2);
/// How long a watch nobody listens to is kept for the next subscriber of its key.
const LINGER: Duration = Duration::from_secs(2);
/// The most watches one client keeps that nobody listens to.
const MAX_IDLE: usize = 32;
/// The id of the watch that opens a stream when no real one is waiting; real ids
/// count up from 1 and never reach it.
const PLACEHOLDER_ID: i64 = i64::MAX;

pub(super) struct Hub {
    client: WatchClient,
    rpc: Rpc,
    /// By watch id.
    entries: HashMap<i64, Entry>,
    /// Each subscription's watch id.
    subscriptions: HashMap<i64, i64>,
    next_watch: i64,
    link: Option<(WatchRequestSender, WatchResponseStream)>,
    counts: Arc<Counts>,
}

/// A watch of one key's (or one range's) deletions from the current revision:
/// no start revision, so etcd adds it to its synced watchers, not to the
/// catch-up sweep.
fn create_options(id: i64, range_end: &Bytes) -> WatchOptions {
    let options = WatchOptions::new()
        .with_watch_id(id)
        .with_filters([WatchFilterType::NoPut]);
    if range_end.is_empty() {
        options
    } else {
        options.with_range(range_end.clone())
    }
}

impl Hub {
    pub(super) fn new(client: WatchClient, rpc: Rpc, counts: Arc<Counts>) -> Self {
        Hub {
            client,
            rpc,
            entries: HashMap::new(),
            subscriptions: HashMap::new(),
            next_watch: 1,
            link: None,
            counts,
        }
    }

    pub(super) async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut reconnect_at: Option<Instant> = None;
        let mut backoff = Backoff::new(RECONNECT_DELAY, RECONNECT_DELAY_MAX);
        // A watch was asked for while the stream was down. It is opened even if that
        // watch is gone by then, so the stream is up for the next one: a cycle that
        // opened a stream of its own would cost an RPC.
        let mut asked = false;
        loop {
            let connected = self.link.is_some();
            let retry = reconnect_at.filter(|_| !connected && (asked || !self.entries.is_empty()));
            let expiry = self.entries.values().filter_map(Entry::idle_since).min();
            tokio::select! {
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Add { id, key, range_end, linger, notices }) => {
                        if !self.attach(id, &key, &range_end, &notices)
                            && !self.create(id, (key, range_end, linger), notices).await
                        {
                            asked = true;
                            reconnect_at.get_or_insert_with(Instant::now);
                        }
                    }
                    Some(Command::Remove { id }) => self.detach(id).await,
                },
                message = next_message(&mut self.link), if connected => match message {
                    Ok(Some(response)) => {
                        backoff.reset();
                        self.dispatch(response).await;
                    }
                    other => {
                        if let Err(e) = other {
                            tracing::debug!(error = %e, "etcd watch stream broke; reopening");
                        }
                        self.broken();
                    }
                },
                _ = sleep_until_some(expiry.map(|since| since + LINGER)) => self.expire().await,
                _ = sleep_until_some(retry) => {
                    reconnect_at = None;
                    if self.connect().await {
                        asked = false;
                    } else {
                        reconnect_at = Some(Instant::now() + backoff.next_delay());
                    }
                }
            }
            if self.link.is_none() && (asked || !self.entries.is_empty()) && reconnect_at.is_none()
            {
                reconnect_at = Some(Instant::now() + backoff.next_delay());
            }
        }
    }

    /// Hands subscription `id` an idle watch of `key`, if there is one, with what
    /// it needs to know: since when the watch delivers every deletion, and the
    /// latest deletion it delivered so far (it may postdate what the subscriber
    /// last read, and a subscriber ignores one that does not).
    fn attach(
        &mut self,
        id: i64,
        key: &Bytes,
        range_end: &Bytes,
        notices: &mpsc::UnboundedSender<Notice>,
    ) -> bool {
        let Some((&watch, entry)) = self
            .entries
            .iter_mut()
            .find(|(_, e)| e.key == *key && e.range_end == *range_end && e.idle_since().is_some())
        else {
            return false;
        };
        entry.listener = Listener::Subscribed(notices.clone());
        if let Some(start) = entry.start {
            entry.send(Notice::Resumed(start));
        }
        if let Some((at, deleted)) = entry.last_deleted.clone() {
            entry.send(Notice::Deleted(at, deleted));
        }
        self.subscriptions.insert(id, watch);
        true
    }

    /// Creates a watch for subscription `id`. Returns whether the stream was up.
    async fn create(
        &mut self,
        id: i64,
        (key, range_end, linger): (Bytes, Bytes, bool),
        notices: mpsc::UnboundedSender<Notice>,
    ) -> bool {
        let watch = self.next_watch;
        self.next_watch += 1;
        self.counts.created.fetch_add(1, Ordering::Relaxed);
        let connected = self.link.is_some();
        if connected {
            self.send_create(watch, &key, &range_end).await;
        }
        let listener = Listener::Subscribed(notices);
        let entry = Entry {
            key,
            range_end,
            linger,
            start: None,
            listener,
            last_deleted: None,
        };
        self.entries.insert(watch, entry);
        self.subscriptions.insert(id, watch);
        connected
    }

    /// Subscription `id` is gone: its watch lingers for the next subscriber of the
    /// key, unless too many already do, or it was asked not to (a range, a name
    /// other clients take in turn): then it is cancelled at once, or it would
    /// receive events nobody reads.
    async fn detach(&mut self, id: i64) {
        let Some(watch) = self.subscriptions.remove(&id) else {
            return;
        };
        if self.entries.get(&watch).is_some_and(|e| !e.linger) {
            self.entries.remove(&watch);
            self.send_cancel(watch).await;
            return;
        }
        if let Some(entry) = self.entries.get_mut(&watch) {
            entry.listener = Listener::Idle(Instant::now());
        }
        // Counted first: the list of idle watches is built only when one must go.
        let idle = self.entries.values().filter(|e| e.idle_since().is_some());
        let excess = idle.count().saturating_sub(MAX_IDLE);
        if excess > 0 {
            let mut oldest: Vec<(Instant, i64)> = self
                .entries
                .iter()
                .filter_map(|(w, e)| e.idle_since().map(|since| (since, *w)))
                .collect();
            oldest.sort_unstable();
            for (_, watch) in &oldest[..excess] {
                self.entries.remove(watch);
                self.send_cancel(*watch).await;
            }
        }
    }

    /// Cancels the watches nobody has listened to for [`LINGER`].
    async fn expire(&mut self) {
        let now = Instant::now();
        let expired: Vec<i64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.idle_since().is_some_and(|since| since + LINGER <= now))
            .map(|(w, _)| *w)
            .collect();
        for watch in expired {
            self.entries.remove(&watch);
            self.send_cancel(watch).await;
        }
    }

    /// The stream is gone, and every watch on it. Watches nobody listens to are
    /// dropped; the others are created again once the stream is back.
    fn broken(&mut self) {
        self.link = None;
        self.entries.retain(|_, e| e.idle_since().is_none());
        for entry in self.entries.values_mut() {
            entry.start = None;
        }
    }

    /// Opens the stream with one watch, then re-creates the others on it. Each
    /// starts at the current revision again; its `created` reply tells the
    /// subscriber whether to re-read what it may have missed meanwhile.
    async fn connect(&mut self) -> bool {
        let mut watches: Vec<(i64, Bytes, Bytes)> = self
            .entries
            .iter()
            .map(|(id, e)| (*id, e.key.clone(), e.range_end.clone()))
            .collect();
        // The stream opens with a create request; with no watch left to create, a
        // placeholder one opens it and is cancelled as an unknown watch.
        let (first, key, range_end) =
            watches
                .pop()
                .unwrap_or((PLACEHOLDER_ID, Bytes::from_static(&[0]), Bytes::new()));
        let options = create_options(first, &range_end);
        match self
            .rpc
            .call("watch stream", self.client.watch(key, Some(options)))
            .await
        {
            Ok(link) => self.link = Some(link),
            Err(Failure::Other(e)) => {
                tracing::debug!(error = %e, "opening the etcd watch stream failed");
                return false;
            }
            Err(Failure::LeaseNotFound) => return false,
        }
        for (id, key, range_end) in watches {
            self.send_create(id, &key, &range_end).await;
        }
        self.link.is_some()
    }

    async fn send_create(&mut self, id: i64, key: &Bytes, range_end: &Bytes) {
        let options = create_options(id, range_end);
        let timeout = self.rpc.timeout;
        let Some((sender, _)) = self.link.as_mut() else {
            return;
        };
        // A stream that does not take a request within the timeout is broken.
        if !matches!(
            tokio::time::timeout(timeout, sender.watch(key.clone(), Some(options))).await,
            Ok(Ok(()))
        ) {
            self.broken();
        }
    }

    async fn send_cancel(&mut self, id: i64) {
        let timeout = self.rpc.timeout;
        let Some((sender, _)) = self.link.as_mut() else {
            return;
        };
        if !matches!(
            tokio::time::timeout(timeout, sender.cancel(id)).await,
            Ok(Ok(()))
        ) {
            self.broken();
        }
    }

    async fn dispatch(&mut self, response: WatchResponse) {
        let id = response.watch_id();
        let Some(entry) = self.entries.get_mut(&id) else {
            // A watch created before it was cancelled here: cancel it (again).
            if response.created() && !response.canceled() {
                self.send_cancel(id).await;
            }
            return;
        };
        if response.canceled() {
            let notice = if response.compact_revision() > 0 {
                Notice::Resync
            } else {
                Notice::Failed(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason()
                ))
            };
            entry.send(notice);
            self.entries.remove(&id);
            return;
        }
        if response.created() {
            // The watch delivers deletions after the header's revision. Without a
            // header the start is unknown: make the subscriber read.
            let start = response.header().map_or(i64::MAX, |h| h.revision());
            entry.start = Some(start);
            entry.send(Notice::Created(start));
        }
        for event in response.events() {
            // With the NoPut filter only deletions arrive; a deleted key has version 0.
            let Some(kv) = event.kv().filter(|kv| kv.version() == 0) else {
                continue;
            };
            let at = kv.mod_revision();
            self.counts.delivered.fetch_add(1, Ordering::Relaxed);
            let key: Arc<[u8]> = Arc::from(kv.key());
            if entry
                .last_deleted
                .as_ref()
                .is_none_or(|(last, _)| *last < at)
            {
                entry.last_deleted = Some((at, key.clone()));
            }
            entry.send(Notice::Deleted(at, key));
        }
    }
}

async fn next_message(
    link: &mut Option<(WatchRequestSender, WatchResponseStream)>,
) -> Result<Option<WatchResponse>, crate::client::Error> {
    match link {
        Some((_, stream)) => stream.message().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
