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
use feed::{Event, Feed};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

mod feed;
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

/// Reconnect pacing. The cap bounds how long after a restarted server answers
/// again its held leases are checked; a refused connect costs next to nothing.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

struct SubscriberTask {
    target: Target,
    endpoint: Arc<str>,
    timeouts: Timeouts,
    registry: Shared,
    requests: mpsc::UnboundedReceiver<String>,
    holds: watch::Receiver<usize>,
    up: Arc<AtomicBool>,
    connected: watch::Sender<u64>,
    conn: Option<Feed>,
    /// What the server has confirmed on the current connection.
    subscribed: HashSet<String>,
    retry_at: Option<Instant>,
    reconnect: Backoff,
}

impl SubscriberTask {
    async fn run(mut self) {
        loop {
            let wanted =
                *self.holds.borrow_and_update() > 0 || !lock(&self.registry).channels.is_empty();
            if self.conn.is_none() && self.retry_at.is_none() && wanted {
                self.connect().await;
            }
            let retry_at = self.retry_at;
            tokio::select! {
                request = self.requests.recv() => match request {
                    Some(channel) => self.reconcile(channel).await,
                    // The lock client is gone.
                    None => return,
                },
                event = next_event(&mut self.conn) => match event {
                    Event::Message(name) => lock(&self.registry).wake_one(&name),
                    Event::Dropped(name) => self.dropped(name).await,
                    Event::Closed => self.disconnected("the subscriber connection closed"),
                },
                _ = sleep_until_some(retry_at) => self.retry_at = None,
                // A lease is held while there is no connection: make one.
                changed = self.holds.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Connects and subscribes every wanted channel in one command.
    async fn connect(&mut self) {
        let connect = Feed::open(&self.target, self.timeouts.connect);
        let mut feed = match tokio::time::timeout(self.timeouts.connect, connect).await {
            Ok(Ok(feed)) => feed,
            Ok(Err(e)) => return self.disconnected(&e.to_string()),
            Err(_) => return self.disconnected("connect timed out"),
        };
        let wanted: Vec<String> = lock(&self.registry).channels.keys().cloned().collect();
        if !wanted.is_empty() {
            match tokio::time::timeout(self.timeouts.reply, feed.subscribe(&wanted)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return self.disconnected(&e.to_string()),
                Err(_) => return self.disconnected("SUBSCRIBE timed out"),
            }
        }
        self.subscribed = wanted.into_iter().collect();
        self.conn = Some(feed);
        self.reconnect.reset();
        self.up.store(true, Ordering::SeqCst);
        self.connected.send_modify(|n| *n += 1);
        let mut registry = lock(&self.registry);
        registry.down = false;
        for (name, channel) in &registry.channels {
            if self.subscribed.contains(name) {
                let was = channel.readiness.send_replace(Readiness::Ready);
                // Waiters that polled while we were down may have missed a release;
                // pending ones attempt right after this anyway.
                if was == Readiness::Down {
                    for (_, signal) in &channel.waiters {
                        signal.wake();
                    }
                }
            }
        }
    }

    /// Makes the server's subscription of `channel` match the registry.
    async fn reconcile(&mut self, channel: String) {
        let Some(feed) = self.conn.as_mut() else {
            // Subscribed with the others when the connection is made.
            return;
        };
        let wanted = lock(&self.registry).channels.contains_key(&channel);
        let have = self.subscribed.contains(&channel);
        let outcome = if wanted && !have {
            let channels = std::slice::from_ref(&channel);
            tokio::time::timeout(self.timeouts.reply, feed.subscribe(channels)).await
        } else if !wanted && have {
            tokio::time::timeout(self.timeouts.reply, feed.unsubscribe(&channel)).await
        } else {
            Ok(Ok(()))
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return self.disconnected(&e.to_string()),
            Err(_) => return self.disconnected("SUBSCRIBE timed out"),
        }
        if wanted {
            self.subscribed.insert(channel.clone());
        } else {
            self.subscribed.remove(&channel);
        }
        // The registry may have changed meanwhile; a later request fixes the server
        // side, and an entry present now is covered by the subscription made.
        if let Some(entry) = lock(&self.registry).channels.get(&channel)
            && self.subscribed.contains(&channel)
        {
            entry.readiness.send_replace(Readiness::Ready);
        }
    }

    /// The server ended a subscription (a cluster slot moved away): subscribe
    /// again where the slot is now, and wake the waiters, who may have missed
    /// a release in between.
    async fn dropped(&mut self, channel: String) {
        if !self.subscribed.remove(&channel) {
            // The confirmation of our own unsubscribe.
            return;
        }
        // Woken after the new subscription is in place (or known down, which
        // wakes them anyway), so a release from then on reaches them.
        self.reconcile(channel.clone()).await;
        if let Some(entry) = lock(&self.registry).channels.get(&channel) {
            for (_, signal) in &entry.waiters {
                signal.wake();
            }
        }
    }

    fn disconnected(&mut self, why: &str) {
        tracing::debug!(endpoint = %self.endpoint, why, "redis subscriber connection down; waiters poll until it is back");
        self.conn = None;
        self.up.store(false, Ordering::SeqCst);
        self.subscribed.clear();
        self.retry_at = Some(Instant::now() + self.reconnect.next_delay());
        let mut registry = lock(&self.registry);
        registry.down = true;
        registry.set_all(Readiness::Down);
        registry.wake_all();
    }
}

async fn next_event(conn: &mut Option<Feed>) -> Event {
    match conn {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
