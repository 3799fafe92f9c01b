//! Waiting for a release: one subscriber connection per server, shared by every
//! waiter of a lock client, and a registry of who waits on which channel.
//!
//! Invariants:
//! - The registry is the truth of which channels are wanted; the subscriber task
//!   only makes the server's subscriptions match it (level-triggered), so
//!   subscribe/unsubscribe races between arriving and leaving waiters cannot leave
//!   a waiter unsubscribed.
//! - A waiter attempts the lock only after its channel is confirmed subscribed
//!   (or known to be down), so a release after the attempt always wakes it.
//! - A disconnect wakes every waiter, and so does the reconnect after it:
//!   messages may have been lost in between.
//! - While a lease is held the connection is kept up even with no waiter: it
//!   always reads, so it sees a dead server at once, and each connection made is
//!   counted for the restart check of the held leases (the first one too: the
//!   server may have restarted before it).
//! - A message wakes one waiter of this client (round robin); a waiter that was
//!   woken and leaves before acting on it passes the wake on.

use crate::sentinel::Target;
use distlock_core::toolkit::Backoff;
use distlock_core::toolkit::Timeouts;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use task::{MAX_BACKOFF, MIN_BACKOFF, SubscriberTask};
use tokio::sync::{Notify, mpsc, watch};

mod feed;
mod task;
mod waiting;
pub(crate) use waiting::Waiting;

/// Whether a channel's subscription is in place on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    /// Being subscribed.
    Pending,
    /// Subscribed: a release will wake the waiters.
    Ready,
    /// The subscriber connection is down: waiters poll.
    Down,
}

/// One waiter's wake-up, shared by its registrations on every server.
#[derive(Debug, Default)]
struct Signal {
    notify: Notify,
    wakes: AtomicU64,
    handled: AtomicU64,
}

impl Signal {
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_one();
    }

    fn unhandled(&self) -> bool {
        self.wakes.load(Ordering::SeqCst) > self.handled.load(Ordering::SeqCst)
    }
}

struct Channel {
    waiters: VecDeque<(u64, Arc<Signal>)>,
    readiness: watch::Sender<Readiness>,
}

#[derive(Default)]
struct Registry {
    channels: HashMap<String, Channel>,
    next_id: u64,
    down: bool,
}

type Shared = Arc<Mutex<Registry>>;

fn lock(registry: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Registry {
    fn wake_all(&self) {
        for channel in self.channels.values() {
            for (_, signal) in &channel.waiters {
                signal.wake();
            }
        }
    }

    fn wake_one(&mut self, name: &str) {
        if let Some(channel) = self.channels.get_mut(name)
            && let Some(front) = channel.waiters.pop_front()
        {
            front.1.wake();
            channel.waiters.push_back(front);
        }
    }

    fn set_all(&self, readiness: Readiness) {
        for channel in self.channels.values() {
            channel.readiness.send_replace(readiness);
        }
    }
}

/// The shared subscriber of one lock client on one server. The connection is made
/// when the first waiter arrives or a lease is held, and kept while the client
/// lives.
pub(crate) struct Subscriber {
    registry: Shared,
    sync: mpsc::UnboundedSender<String>,
    holds: watch::Sender<usize>,
    /// Whether the task has a connection: a hold needs to wake it only if not.
    up: Arc<AtomicBool>,
    connects: watch::Receiver<u64>,
}

/// Keeps the subscriber connected while a lease is held.
pub(crate) struct Hold(watch::Sender<usize>);

impl Drop for Hold {
    fn drop(&mut self) {
        // The connection stays when the last hold ends: nothing to tell the task.
        self.0.send_if_modified(|holds| {
            *holds -= 1;
            false
        });
    }
}

impl Subscriber {
    /// Starts the subscriber task (it connects lazily and ends with the client).
    pub fn start(target: Target, endpoint: Arc<str>, timeouts: Timeouts) -> Self {
        let registry = Shared::default();
        let (sync, requests) = mpsc::unbounded_channel();
        let holds = watch::Sender::new(0);
        let up = Arc::new(AtomicBool::new(false));
        let (connected, connects) = watch::channel(0);
        let task = SubscriberTask {
            holds: holds.subscribe(),
            up: up.clone(),
            connected,
            target,
            endpoint,
            timeouts,
            registry: registry.clone(),
            requests,
            conn: None,
            subscribed: HashSet::new(),
            retry_at: None,
            reconnect: Backoff::new(MIN_BACKOFF, MAX_BACKOFF),
        };
        tokio::spawn(task.run());
        Subscriber {
            registry,
            sync,
            holds,
            up,
            connects,
        }
    }

    /// Keeps the connection up until the returned guard is dropped.
    pub fn hold(&self) -> Hold {
        // The task reads the count whenever it may connect; it must be woken only
        // when it sits idle without a connection. Checked under the count's lock,
        // after which a task going down reads the new count when it retries.
        self.holds.send_if_modified(|holds| {
            *holds += 1;
            *holds == 1 && !self.up.load(Ordering::SeqCst)
        });
        Hold(self.holds.clone())
    }

    /// Counts the connections made: each may reach a server that restarted or
    /// replaced the one a lease was acquired on.
    pub fn connects(&self) -> watch::Receiver<u64> {
        self.connects.clone()
    }

    /// Registers `signal` as a waiter on `channel`; it is woken by releases once
    /// the subscription is in place.
    fn register(&self, channel: &str, signal: Arc<Signal>) -> Registration {
        let mut registry = lock(&self.registry);
        registry.next_id += 1;
        let id = registry.next_id;
        let initial = if registry.down {
            Readiness::Down
        } else {
            Readiness::Pending
        };
        let entry = registry
            .channels
            .entry(channel.to_owned())
            .or_insert_with(|| Channel {
                waiters: VecDeque::new(),
                readiness: watch::Sender::new(initial),
            });
        entry.waiters.push_back((id, signal.clone()));
        let readiness = entry.readiness.subscribe();
        if entry.waiters.len() == 1 {
            // Sent under the registry lock, so requests reach the task in the order
            // the registry changed.
            let _ = self.sync.send(channel.to_owned());
        }
        Registration {
            registry: self.registry.clone(),
            sync: self.sync.clone(),
            channel: channel.to_owned(),
            id,
            signal,
            readiness,
        }
    }
}

/// A waiter on one channel of one server; leaving (drop) unsubscribes when it was
/// the last waiter on that channel.
struct Registration {
    registry: Shared,
    sync: mpsc::UnboundedSender<String>,
    channel: String,
    id: u64,
    signal: Arc<Signal>,
    readiness: watch::Receiver<Readiness>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = lock(&self.registry);
        let Some(channel) = registry.channels.get_mut(&self.channel) else {
            return;
        };
        channel.waiters.retain(|(id, _)| *id != self.id);
        if channel.waiters.is_empty() {
            registry.channels.remove(&self.channel);
            let _ = self.sync.send(self.channel.clone());
        } else if self.signal.unhandled() {
            // We were woken for a release and leave without trying: the lock may be
            // free, so another waiter must look.
            registry.wake_one(&self.channel);
        }
    }
}
