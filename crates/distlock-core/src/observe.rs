//! Watching who leads an election without campaigning: [`LeaderWatch`], the
//! stream `LeaderElection::observe` returns, written once over any adapter's
//! `leader()` read and its optional push ([`LeaderChanges`]).

use crate::backend::DynLeaderChanges;
use crate::inspect::Holder;
use crate::toolkit::Backoff;
use crate::{FencingToken, LockError, LockKey};
use async_trait::async_trait;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// One item of a [`LeaderWatch`]: the leader (`None` when nobody leads), or
/// the error of a failed read.
pub type LeaderUpdate = Result<Option<Holder>, LockError>;

/// The longest pause between two reads of a backend that cannot push.
pub const OBSERVE_POLL_CAP: Duration = Duration::from_millis(250);

/// The longest pause between two reads where the backend pushes: a fallback
/// for a push that never came (a message lost with its connection).
const PUSH_FALLBACK_CAP: Duration = Duration::from_secs(2);

/// The shortest pause bounded by a leader's expiry, so a leader the server
/// reports past its expiry is not read in a busy loop.
const EXPIRY_FLOOR: Duration = Duration::from_millis(20);

/// What an observer reads: the election's adapter, type-erased.
#[async_trait]
pub(crate) trait LeaderSource: Send + Sync + 'static {
    async fn leader(&self, name: &LockKey) -> LeaderUpdate;
    async fn changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError>;
}

type Step = Pin<Box<dyn Future<Output = (Observer, LeaderUpdate)> + Send>>;

/// The leader of one election as it changes: the current state first, then
/// each change, never the same leader (proposal or owner, and term) twice in
/// a row. A follower learns of a change by the server's push where the
/// backend has one (some push only a leader's departure, and a vacant seat
/// is polled), else by polling with a backoff capped at [`OBSERVE_POLL_CAP`],
/// and a push backend is still read every 2 s in case a push was lost. It
/// never waits past the current leader's expiry where the server reports it
/// ([`Holder::expires_in`]). A consumer slower than the changes sees the
/// state at the time it asks, not every state in between.
///
/// A failed read is yielded as an `Err` item and the watch goes on, reading
/// again after a backoff (up to 5 s) and yielding the state it then finds,
/// even if it is the one before the error. The watch never ends on its own;
/// dropping it ends every subscription it holds.
///
/// It is a [`futures_core::Stream`]; [`LeaderWatch::next`] reads it without
/// a stream library.
pub struct LeaderWatch {
    name: LockKey,
    idle: Option<Observer>,
    step: Option<Step>,
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    pub(crate) fn new(source: Arc<dyn LeaderSource>, name: &LockKey) -> Self {
        let observer = Observer {
            source,
            name: name.clone(),
            changes: None,
            last: None,
            poll: Backoff::new(Duration::from_millis(25), OBSERVE_POLL_CAP),
            errors: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
            after_error: None,
        };
        LeaderWatch {
            name: name.clone(),
            idle: Some(observer),
            step: None,
        }
    }

    /// The next change (the current state first). Cancel-safe: a dropped
    /// call loses nothing, the next one goes on where it stopped.
    pub async fn next(&mut self) -> Option<LeaderUpdate> {
        std::future::poll_fn(|cx| self.poll_step(cx)).await
    }

    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<LeaderUpdate>> {
        if self.step.is_none() {
            let Some(observer) = self.idle.take() else {
                return Poll::Ready(None);
            };
            self.step = Some(Box::pin(observer.step()));
        }
        let Some(step) = self.step.as_mut() else {
            return Poll::Ready(None);
        };
        match step.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready((observer, update)) => {
                self.step = None;
                self.idle = Some(observer);
                Poll::Ready(Some(update))
            }
        }
    }
}

impl futures_core::Stream for LeaderWatch {
    type Item = LeaderUpdate;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeaderUpdate>> {
        self.get_mut().poll_step(cx)
    }
}

/// Who leads, as compared for "no duplicate in a row": the remaining time
/// of a lease changes with every read and is not a change of leader.
type Seen = Option<(String, Option<FencingToken>)>;

struct Observer {
    source: Arc<dyn LeaderSource>,
    name: LockKey,
    /// `None` until subscribed (again, after an error).
    changes: Option<DynLeaderChanges>,
    /// The last state yielded; `None` before the first and after an error.
    last: Option<Seen>,
    poll: Backoff,
    errors: Backoff,
    after_error: Option<Duration>,
}

impl Observer {
    async fn step(mut self) -> (Self, LeaderUpdate) {
        if let Some(pause) = self.after_error.take() {
            tokio::time::sleep(pause).await;
        }
        loop {
            match self.look().await {
                Ok(Some(leader)) => return (self, Ok(leader)),
                Ok(None) => {}
                Err(e) => {
                    self.changes = None;
                    self.last = None;
                    self.after_error = Some(self.errors.next_delay());
                    return (self, Err(e));
                }
            }
        }
    }

    /// Reads the leader: gives it when it differs from the last one yielded,
    /// else waits for a push or the next poll and gives `None`.
    async fn look(&mut self) -> Result<Option<Option<Holder>>, LockError> {
        if self.changes.is_none() {
            self.changes = Some(self.source.changes(&self.name).await?);
        }
        let leader = self.source.leader(&self.name).await?;
        self.errors.reset();
        let seen: Seen = leader.as_ref().map(|h| (h.owner.clone(), h.token));
        if self.last.as_ref() != Some(&seen) {
            self.last = Some(seen);
            self.poll.reset();
            return Ok(Some(leader));
        }
        // A push that tells only of departures leaves a vacant seat to the poll.
        let pushed = match self.changes.as_mut() {
            Some(Some(push)) if leader.is_some() || push.announces_arrivals() => Some(push),
            _ => None,
        };
        let pause = match pushed {
            Some(_) => PUSH_FALLBACK_CAP,
            None => self.poll.next_delay(),
        };
        let expiry = leader.and_then(|h| h.expires_in);
        let pause = expiry.map_or(pause, |left| left.max(EXPIRY_FLOOR).min(pause));
        match pushed {
            Some(push) => tokio::select! {
                changed = push.changed() => changed?,
                () = tokio::time::sleep(pause) => {}
            },
            None => tokio::time::sleep(pause).await,
        }
        Ok(None)
    }
}
