//! The subscriber task: the one connection per server that makes the server's
//! subscriptions match the registry, reconnects, and turns messages and
//! disconnects into wake-ups. Apart from the registry and its waiters' API so
//! that the level-triggered loop reads on its own.

use super::feed::{Event, Feed};
use super::{Readiness, Shared, lock};
use crate::sentinel::Target;
use distlock_core::toolkit::{Backoff, Timeouts};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Reconnect pacing. The cap bounds how long after a restarted server answers
/// again its held leases are checked; a refused connect costs next to nothing.
pub(super) const MIN_BACKOFF: Duration = Duration::from_millis(10);
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(100);

pub(super) struct SubscriberTask {
    pub(super) target: Target,
    pub(super) endpoint: Arc<str>,
    pub(super) timeouts: Timeouts,
    pub(super) registry: Shared,
    pub(super) requests: mpsc::UnboundedReceiver<String>,
    pub(super) holds: watch::Receiver<usize>,
    pub(super) up: Arc<AtomicBool>,
    pub(super) connected: watch::Sender<u64>,
    pub(super) conn: Option<Feed>,
    /// What the server has confirmed on the current connection.
    pub(super) subscribed: HashSet<String>,
    pub(super) retry_at: Option<Instant>,
    pub(super) reconnect: Backoff,
}

impl SubscriberTask {
    pub(super) async fn run(mut self) {
        // A lease asked for the connection: made even if that lease has ended
        // by now, or a stream of short leases would each ask again.
        let mut asked = false;
        loop {
            let wanted = std::mem::take(&mut asked)
                || *self.holds.borrow_and_update() > 0
                || !lock(&self.registry).channels.is_empty();
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
                changed = self.holds.changed() => match changed {
                    Ok(()) => asked = true,
                    Err(_) => return,
                },
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
