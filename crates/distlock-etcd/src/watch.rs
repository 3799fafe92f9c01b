//! One watch stream per client, shared by every waiter and every held lock.
//!
//! Each subscription watches one key for its deletion, from a given revision, so no
//! delete in between is missed. Watches are created and cancelled with messages on
//! the shared stream: a lock cycle opens no stream of its own. If the stream breaks,
//! it is reopened and every watch re-created from the revision after the last event
//! it delivered.
//!
//! [`KeyDeletion`] is the loss watch of a held lock: its key deleted by anyone
//! but our own release.

use crate::error::Failure;
use crate::protocol;
use crate::rpc::Rpc;
use distlock_core::LossReason;
use distlock_core::toolkit::Backoff;
use etcd_client::{
    KvClient, WatchClient, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::time::sleep_until;

const RECONNECT_DELAY: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(2);
/// The id of the watch that opens a stream when no real one is waiting; real ids
/// count up from 1 and never reach it.
const PLACEHOLDER_ID: i64 = i64::MAX;

/// What a subscription hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The key was deleted at this revision.
    Deleted,
    /// The watch cannot continue from its revision (compacted history); read the
    /// state again and subscribe anew.
    Resync,
    /// etcd cancelled the watch for a reason that will not go away (permissions).
    Failed(String),
}

enum Command {
    Add {
        id: i64,
        key: Vec<u8>,
        from: i64,
        notices: mpsc::UnboundedSender<Notice>,
    },
    Remove {
        id: i64,
    },
}

/// The shared watch stream of one client; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Watches {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicI64>,
    delivered: Arc<AtomicU64>,
}

impl Watches {
    /// Starts the stream's task; the stream itself opens with the first watch.
    pub(crate) fn new(client: WatchClient, rpc: Rpc) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        let delivered = Arc::new(AtomicU64::new(0));
        let hub = Hub {
            client,
            rpc,
            entries: HashMap::new(),
            link: None,
            delivered: delivered.clone(),
        };
        tokio::spawn(hub.run(receiver));
        Watches {
            commands,
            next_id: Arc::new(AtomicI64::new(1)),
            delivered,
        }
    }

    /// Delete events delivered to subscriptions so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Watches `key` for its deletion at revision `from` or later.
    pub(crate) fn deletion(&self, key: &[u8], from: i64) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, notices) = mpsc::unbounded_channel();
        let _ = self.commands.send(Command::Add {
            id,
            key: key.to_vec(),
            from,
            notices: sender,
        });
        Subscription {
            id,
            notices,
            commands: self.commands.clone(),
        }
    }
}

/// One watch; dropping it cancels the watch on the stream.
#[derive(Debug)]
pub(crate) struct Subscription {
    id: i64,
    notices: mpsc::UnboundedReceiver<Notice>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Subscription {
    /// The next notice. The stream task lives as long as any subscription does, so
    /// a closed channel only happens if it crashed; that reads as a resync.
    pub(crate) async fn next(&mut self) -> Notice {
        self.notices.recv().await.unwrap_or(Notice::Resync)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Remove { id: self.id });
    }
}

/// Watches a held key for its deletion by anyone but our own release.
pub(crate) struct KeyDeletion {
    pub(crate) rpc: Rpc,
    pub(crate) kv: KvClient,
    pub(crate) watches: Watches,
    pub(crate) key: Vec<u8>,
    /// The key's create revision: the lock's token.
    pub(crate) revision: i64,
    /// The store revision to watch from.
    pub(crate) from: i64,
    /// Set by our own release, whose deletion is no loss.
    pub(crate) releasing: Arc<AtomicBool>,
    /// The lease slot's clean flag: the key is known gone.
    pub(crate) clean: Arc<AtomicBool>,
}

impl KeyDeletion {
    /// Completes when the key is deleted by someone else; never if our release
    /// deleted it or etcd refuses the watch for good.
    pub(crate) async fn wait(mut self, mut deletion: Subscription) -> LossReason {
        let mut backoff = Backoff::new(self.rpc.timeout / 10, self.rpc.timeout);
        loop {
            match deletion.next().await {
                Notice::Deleted => break,
                Notice::Failed(_) => return std::future::pending().await,
                Notice::Resync => {
                    // History was compacted: read the key instead of its events.
                    match protocol::read_created(&self.rpc, &self.kv, &self.key).await {
                        Ok((Some(created), read_at)) if created == self.revision => {
                            backoff.reset();
                            self.from = read_at.map_or(self.from, |at| at + 1);
                        }
                        Ok(_) => break,
                        Err(_) => tokio::time::sleep(backoff.next_delay()).await,
                    }
                    deletion = self.watches.deletion(&self.key, self.from);
                }
            }
        }
        self.clean.store(true, Ordering::Release);
        if self.releasing.load(Ordering::Acquire) {
            // Our own release deleted it: that is not a loss.
            return std::future::pending().await;
        }
        LossReason::Revoked
    }
}

struct Entry {
    key: Vec<u8>,
    /// The revision to (re)start the watch from.
    from: i64,
    notices: mpsc::UnboundedSender<Notice>,
}

struct Hub {
    client: WatchClient,
    rpc: Rpc,
    entries: HashMap<i64, Entry>,
    link: Option<(WatchRequestSender, WatchResponseStream)>,
    delivered: Arc<AtomicU64>,
}

fn create_options(id: i64, from: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(from)
        .with_filters([WatchFilterType::NoPut])
}

impl Hub {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut reconnect_at: Option<Instant> = None;
        let mut backoff = Backoff::new(RECONNECT_DELAY, RECONNECT_DELAY_MAX);
        // A watch was asked for while the stream was down. It is opened even if that
        // watch is gone by then, so the stream is up for the next one: a cycle that
        // opened a stream of its own would cost an RPC.
        let mut asked = false;
        loop {
            let connected = self.link.is_some();
            let retry = reconnect_at.filter(|_| !connected && (asked || !self.entries.is_empty()));
            tokio::select! {
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Add { id, key, from, notices }) => {
                        if self.link.is_some() {
                            self.send_create(id, &key, from).await;
                        } else {
                            asked = true;
                            reconnect_at.get_or_insert_with(Instant::now);
                        }
                        self.entries.insert(id, Entry { key, from, notices });
                    }
                    Some(Command::Remove { id }) => {
                        if self.entries.remove(&id).is_some() {
                            self.send_cancel(id).await;
                        }
                    }
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
                        self.link = None;
                    }
                },
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

    /// Opens the stream with one watch, then re-creates the others on it.
    async fn connect(&mut self) -> bool {
        let mut watches: Vec<(i64, Vec<u8>, i64)> = self
            .entries
            .iter()
            .map(|(id, e)| (*id, e.key.clone(), e.from))
            .collect();
        // The stream opens with a create request; with no watch left to create, a
        // placeholder one opens it and is cancelled as an unknown watch.
        let (first, key, from) = watches.pop().unwrap_or((PLACEHOLDER_ID, vec![0], 0));
        let options = create_options(first, from);
        match self
            .rpc
            .call("watch stream", self.client.watch(key, Some(options)))
            .await
        {
            Ok(stream) => self.link = Some(stream.split()),
            Err(Failure::Other(e)) => {
                tracing::debug!(error = %e, "opening the etcd watch stream failed");
                return false;
            }
            Err(Failure::LeaseNotFound) => return false,
        }
        for (id, key, from) in watches {
            self.send_create(id, &key, from).await;
        }
        self.link.is_some()
    }

    async fn send_create(&mut self, id: i64, key: &[u8], from: i64) {
        let options = create_options(id, from);
        let timeout = self.rpc.timeout;
        let Some((sender, _)) = self.link.as_mut() else {
            return;
        };
        // A stream that does not take a request within the timeout is broken.
        if !matches!(
            tokio::time::timeout(timeout, sender.watch(key, Some(options))).await,
            Ok(Ok(()))
        ) {
            self.link = None;
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
            self.link = None;
        }
    }

    async fn dispatch(&mut self, response: WatchResponse) {
        let id = response.watch_id();
        let Some(entry) = self.entries.get_mut(&id) else {
            // A watch created before its subscription went away: cancel it (again).
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
            let _ = entry.notices.send(notice);
            self.entries.remove(&id);
            return;
        }
        for event in response.events() {
            // With the NoPut filter only deletions arrive; a deleted key has version 0.
            let Some(kv) = event.kv().filter(|kv| kv.version() == 0) else {
                continue;
            };
            entry.from = entry.from.max(kv.mod_revision() + 1);
            if entry.notices.send(Notice::Deleted).is_ok() {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn next_message(
    link: &mut Option<(WatchRequestSender, WatchResponseStream)>,
) -> Result<Option<WatchResponse>, etcd_client::Error> {
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
