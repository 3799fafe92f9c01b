//! One watch stream per client, shared by every waiter and every held lock.
//!
//! Each subscription watches one key for its deletion **from the current
//! revision**, never from one that has passed: etcd serves a watch whose start
//! revision is behind its store from its catch-up path, which delivers events on
//! a sweep about every 100 ms, while a watch from now joins the synced watchers
//! and gets each event as it is written. What may have happened between the
//! subscriber's last read of the key and the watch's start is closed by a read:
//! etcd's `created` reply names the revision the watch starts after, and the
//! subscriber re-reads the key ([`Wake::Reread`]) when that is after its last
//! read, or after any new watch where [`OnCreate`] asks for it. A watch
//! re-created after the stream broke is treated the same way, so no deletion is
//! missed.
//!
//! Watches are created and cancelled with messages on the shared stream, so a
//! lock cycle opens no stream of its own, and a watch outlives its subscription
//! for a while to serve the next subscriber of the same key (`hub.rs`).
//!
//! [`KeyDeletion`] is the loss watch of a held lock: its key deleted by anyone
//! but our own release.

mod entry;
mod hub;

use crate::client::{KvClient, WatchClient};
use crate::keys::prefix_end;
use crate::protocol;
use crate::rpc::Rpc;
use distlock_core::LossReason;
use distlock_core::toolkit::Backoff;
use hub::Hub;
use prost::bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use tokio::sync::mpsc;

/// What the stream task tells a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Notice {
    /// etcd created the watch (anew, or again after the stream broke): it delivers
    /// every deletion after this store revision, and none before.
    Created(i64),
    /// The watch was already running when handed to this subscription: it
    /// delivers every deletion after this store revision. The latest deletion it
    /// delivered before follows as a `Deleted`.
    Resumed(i64),
    /// The key (this one, of a watched range) was deleted at this revision;
    /// the key is shared with the watch's record of its latest deletion.
    Deleted(i64, Arc<[u8]>),
    /// etcd ended the watch for a reason that does not last (a compacted start
    /// revision): subscribe again.
    Resync,
    /// etcd cancelled the watch for a reason that will not go away (permissions).
    Failed(String),
}

/// When a subscriber reads its key after etcd created its watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCreate {
    /// Always. etcd registers a watch from "now" on its catch-up path after all
    /// when a write commits while it creates it, and that write's event then
    /// waits for the next sweep: if the write was the awaited deletion (the
    /// predecessor releasing just as we queue), the read sees it at once.
    Reread,
    /// Only if the watch started after the key was last read. For a loss watch:
    /// a read on every acquire would cost the uncontended cycle an RPC, and a
    /// loss watch on the catch-up path reports a deletion one sweep late at worst.
    RereadIfLater,
}

/// Why a subscriber should look at its key again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The key was deleted.
    Deleted,
    /// The watch was created after the key was last read, so a deletion in
    /// between would not be delivered, or [`OnCreate`] asks for a read: read the
    /// key.
    Reread,
}

enum Command {
    Add {
        id: i64,
        key: Bytes,
        /// Empty for one key; else the end of the watched range.
        range_end: Bytes,
        /// Whether the watch is kept for the next subscriber once this one goes.
        linger: bool,
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
    counts: Arc<Counts>,
}

/// What the stream task has done so far.
#[derive(Debug, Default)]
struct Counts {
    /// Deletion events etcd delivered.
    delivered: AtomicU64,
    /// Watches created on the stream (not counting re-creations after it broke).
    created: AtomicU64,
    /// Held keys' loss watches subscribed.
    held: AtomicU64,
}

impl Watches {
    /// Starts the stream's task; the stream itself opens with the first watch.
    pub(crate) fn new(client: WatchClient, rpc: Rpc) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts::default());
        tokio::spawn(Hub::new(client, rpc, counts.clone()).run(receiver));
        Watches {
            commands,
            next_id: Arc::new(AtomicI64::new(1)),
            counts,
        }
    }

    /// Deletion events etcd delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.counts.delivered.load(Ordering::Relaxed)
    }

    /// Watches created so far; a subscription that reuses one creates none.
    pub(crate) fn created(&self) -> u64 {
        self.counts.created.load(Ordering::Relaxed)
    }

    /// Held keys' loss watches subscribed so far.
    pub(crate) fn held_count(&self) -> u64 {
        self.counts.held.load(Ordering::Relaxed)
    }

    /// [`Watches::deletion`] of a held key, for its loss signal.
    pub(crate) fn held(&self, key: &Bytes) -> Subscription {
        self.counts.held.fetch_add(1, Ordering::Relaxed);
        self.deletion(key)
    }

    /// Watches `key` for its deletion from the current revision on.
    pub(crate) fn deletion(&self, key: &Bytes) -> Subscription {
        self.subscribe(key.clone(), Bytes::new(), true)
    }

    /// Watches `key` for its deletion from the current revision on, and cancels
    /// the watch when the subscription goes: for a key whose name every client
    /// takes in turn (a semaphore's permit key), where a watch kept for reuse
    /// would receive each later holder's release.
    pub(crate) fn deletion_once(&self, key: &Bytes) -> Subscription {
        self.subscribe(key.clone(), Bytes::new(), false)
    }

    /// Watches every key starting with `prefix` for deletions from the current
    /// revision on (a semaphore's first waiter: any released permit lets it in).
    /// Not kept once the subscription goes: it sees every release under `prefix`.
    pub(crate) fn deletions_under(&self, prefix: &[u8]) -> Subscription {
        let end = prefix_end(prefix).into();
        self.subscribe(Bytes::copy_from_slice(prefix), end, false)
    }

    fn subscribe(&self, key: Bytes, range_end: Bytes, linger: bool) -> Subscription {
        let (id, notices) = self.add(&key, &range_end, linger);
        Subscription {
            id,
            key,
            range_end,
            linger,
            notices,
            watches: self.clone(),
            deleted: None,
        }
    }

    /// Asks the stream task for a watch. If the task is gone, the returned
    /// channel is closed, which the subscription reports as an error.
    fn add(
        &self,
        key: &Bytes,
        range_end: &Bytes,
        linger: bool,
    ) -> (i64, mpsc::UnboundedReceiver<Notice>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, notices) = mpsc::unbounded_channel();
        let _ = self.commands.send(Command::Add {
            id,
            key: key.clone(),
            range_end: range_end.clone(),
            linger,
            notices: sender,
        });
        (id, notices)
    }
}

/// One watch; dropping it hands the watch back to the stream task.
#[derive(Debug)]
pub(crate) struct Subscription {
    id: i64,
    key: Bytes,
    range_end: Bytes,
    linger: bool,
    notices: mpsc::UnboundedReceiver<Notice>,
    watches: Watches,
    /// The key whose deletion the last [`Wake::Deleted`] reported.
    deleted: Option<Arc<[u8]>>,
}

impl Subscription {
    /// Waits until the key may have gone since store revision `seen`, the last
    /// revision at which the caller read it present: its deletion arrived, or the
    /// watch (re)started after `seen` (or was created at all, as `on_create`
    /// says). A start at or before `seen` covers every later deletion, so it
    /// needs no read; a deletion at or before `seen` was of an earlier key of the
    /// same name, so it is no news. `Err` carries etcd's reason for refusing the
    /// watch.
    pub(crate) async fn wake(&mut self, seen: i64, on_create: OnCreate) -> Result<Wake, String> {
        self.deleted = None;
        loop {
            // The stream task lives as long as any subscription does (each holds a
            // sender of its commands), so a closed channel means it crashed.
            let Some(notice) = self.notices.recv().await else {
                return Err("the client's watch stream task ended".to_owned());
            };
            match notice {
                Notice::Created(_) if on_create == OnCreate::Reread => return Ok(Wake::Reread),
                Notice::Created(start) | Notice::Resumed(start) if start <= seen => {}
                Notice::Created(_) | Notice::Resumed(_) => return Ok(Wake::Reread),
                Notice::Deleted(at, _) if at <= seen => {}
                Notice::Deleted(_, key) => {
                    self.deleted = Some(key);
                    return Ok(Wake::Deleted);
                }
                Notice::Failed(reason) => return Err(reason),
                Notice::Resync => {
                    let _ = self.watches.commands.send(Command::Remove { id: self.id });
                    (self.id, self.notices) =
                        self.watches.add(&self.key, &self.range_end, self.linger);
                }
            }
        }
    }
}

impl Subscription {
    /// The key whose deletion the last wake reported (for a range watch, which
    /// key of the range went); `None` if the last wake was not a deletion.
    pub(crate) fn deleted_key(&self) -> Option<&[u8]> {
        self.deleted.as_deref()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.watches.commands.send(Command::Remove { id: self.id });
    }
}

/// Watches a held key for its deletion by anyone but our own release.
pub(crate) struct KeyDeletion {
    pub(crate) rpc: Rpc,
    pub(crate) kv: KvClient,
    pub(crate) key: Bytes,
    /// The key's create revision: the lock's token.
    pub(crate) revision: i64,
    /// The store revision at which the key was last read as ours.
    pub(crate) seen: i64,
    /// Set by our own release, whose deletion is no loss.
    pub(crate) releasing: Arc<AtomicBool>,
    /// The lease slot's clean flag: the key is known gone.
    pub(crate) clean: Arc<AtomicBool>,
}

impl KeyDeletion {
    /// Completes when the key is deleted by someone else; never if our release
    /// deleted it or etcd refuses the watch for good.
    pub(crate) async fn wait(mut self, mut deletion: Subscription) -> LossReason {
        loop {
            match deletion.wake(self.seen, OnCreate::RereadIfLater).await {
                Ok(Wake::Deleted) => break,
                Err(_) => return std::future::pending().await,
                Ok(Wake::Reread) => {
                    if self.releasing.load(Ordering::Acquire) {
                        // Our release has begun: what becomes of the key is no loss,
                        // and reading it would cost the cycle an RPC.
                        return std::future::pending().await;
                    }
                    if !self.still_ours().await {
                        break;
                    }
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

    /// Reads the key until etcd answers: whether it still has our create revision.
    /// Advances `seen` to the read's revision when it does.
    async fn still_ours(&mut self) -> bool {
        let mut backoff = Backoff::new(self.rpc.timeout / 10, self.rpc.timeout);
        loop {
            match protocol::read_created(&self.rpc, &self.kv, &self.key).await {
                Ok((Some(created), read_at)) if created == self.revision => {
                    self.seen = read_at.unwrap_or(self.seen);
                    return true;
                }
                Ok(_) => return false,
                Err(_) => tokio::time::sleep(backoff.next_delay()).await,
            }
        }
    }
}
