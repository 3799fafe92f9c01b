//! A waiter's side of the subscriber: registered on the subscriber of every
//! server whose release it must hear, it attempts only once its subscriptions
//! are in place, then sleeps until a release wakes it or the holder's ttl runs
//! out.

use super::{Readiness, Registration, Signal, Subscriber};
use distlock_core::adapter::WaitUntil;
use distlock_core::toolkit::Backoff;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The longest a waiter sleeps without a message before it looks again, in case
/// a release message was lost on a connection that failed silently.
const MAX_NAP: Duration = Duration::from_secs(5);
/// How often a waiter looks while a release would not be heard.
const POLL_WHEN_DOWN: Duration = Duration::from_millis(200);

/// One waiter on one lock, registered with the subscriber of every server whose
/// release it must hear (one for `RedisLock`, every node for `Redlock`).
pub(crate) struct Waiting {
    signal: Arc<Signal>,
    registrations: Vec<Registration>,
    poll: Backoff,
}

impl Waiting {
    /// Registers on every subscriber, then waits until each subscription is in
    /// place or known to be down, at most until `until`: an attempt made after
    /// this is followed by a wake for any release the subscribed servers see.
    pub async fn start<'a>(
        subscribers: impl IntoIterator<Item = &'a Subscriber>,
        channel: &str,
        until: Instant,
    ) -> Waiting {
        let signal = Arc::new(Signal::default());
        let mut registrations: Vec<Registration> = subscribers
            .into_iter()
            .map(|subscriber| subscriber.register(channel, signal.clone()))
            .collect();
        for registration in &mut registrations {
            let settled = registration
                .readiness
                .wait_for(|r| *r != Readiness::Pending);
            let _ = tokio::time::timeout_at(until, settled).await;
        }
        Waiting {
            signal,
            registrations,
            poll: Backoff::new(POLL_WHEN_DOWN, POLL_WHEN_DOWN),
        }
    }

    /// Marks the wakes seen so far; take it before an attempt.
    pub fn seen(&self) -> u64 {
        self.signal.wakes.load(Ordering::SeqCst)
    }

    /// The attempt started after `seen` ended definitively (won or held
    /// elsewhere), so those wakes need not be passed on.
    pub fn handled(&self, seen: u64) {
        self.signal.handled.fetch_max(seen, Ordering::SeqCst);
    }

    /// On how many servers a release wakes this waiter now.
    pub fn ready(&self) -> usize {
        let ready = |r: &&Registration| *r.readiness.borrow() == Readiness::Ready;
        self.registrations.iter().filter(ready).count()
    }

    /// Sleeps until a release wakes the waiter or the holder's remaining ttl
    /// (`pttl` in ms: -1 no expiry, -2 gone) runs out, at most [`MAX_NAP`] when a
    /// release would be `heard`, else one poll interval. Returns `false` when
    /// `wait` ended first.
    pub async fn nap(&mut self, pttl: i64, heard: bool, wait: WaitUntil) -> bool {
        let until_expiry = match u64::try_from(pttl) {
            Ok(ms) => Duration::from_millis(ms.saturating_add(1)),
            Err(_) if pttl == -1 => MAX_NAP,
            Err(_) => Duration::ZERO,
        };
        let nap = until_expiry.min(MAX_NAP);
        tokio::select! {
            _ = self.signal.notify.notified() => true,
            _ = tokio::time::sleep(nap), if heard => true,
            more = self.poll.pause(nap, wait), if !heard => more,
            _ = wait.reached() => false,
        }
    }
}
