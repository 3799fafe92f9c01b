//! Waiting for a turn, written once for the semaphore, the read-write lock and
//! the fair lock: try; if refused, register on the client's shared subscriber
//! (on the primitive's release channel, and on the waiter's own channel when
//! others hand it the turn by name), try again only once subscribed, then sleep
//! until a message or the script's hint and try again, until won or the wait
//! ends. Polls while the subscriber is down.

use crate::protocol::ServerClient;
use crate::subscriber::Waiting;
use distlock_core::LockError;
use distlock_core::adapter::{AcquireRequest, WaitUntil};
use std::future::Future;
use std::time::{Duration, Instant};

/// One attempt's outcome.
pub(crate) enum Attempt<T> {
    /// Won.
    Won(T),
    /// Not now: sleep at most this many ms before the next attempt (-2: no
    /// expiry to wait for).
    Wait(i64),
}

/// How long `req`'s place in a queue lives without a new attempt: none for a
/// request that does not wait; else its ttl (a vanished waiter holds the queue
/// no longer than a crashed holder holds the lock), within 300 ms (so that
/// short ttls do not make waiters spin) and 5 s (so that a vanished waiter
/// does not stall the queue for a long ttl).
pub(crate) fn place_lifetime(req: &AcquireRequest<'_>) -> Duration {
    match req.wait {
        WaitUntil::No => Duration::ZERO,
        _ => (req.ttl).clamp(Duration::from_millis(300), Duration::from_secs(5)),
    }
}

/// The sleep of a queued waiter told to wait `hint` ms (negative: nothing to
/// wait for): it comes back within a third of its place's lifetime, so a live
/// waiter never loses its place.
pub(crate) fn queued_wait(hint: i64, place: Duration) -> i64 {
    let refresh = i64::try_from((place / 3).as_millis()).unwrap_or(i64::MAX);
    if hint < 0 { refresh } else { hint.min(refresh) }
}

/// Runs `attempt` (told whether the caller has been waiting) until it wins or
/// `req.wait` ends. `channels` are the release channel and, if any, the
/// waiter's own; `budget` bounds the wait for the subscriptions. Cancel-safe
/// when `attempt` is (an attempt cut off by the wait's end is dropped).
pub(crate) async fn take_turns<T, F, Fut>(
    server: &ServerClient,
    (release, own): (&str, Option<&str>),
    req: &AcquireRequest<'_>,
    budget: Duration,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<Attempt<T>, LockError>>,
{
    // The uncontended path: one round trip, no subscription.
    if let Attempt::Won(won) = raced(req, attempt(false)).await? {
        return Ok(won);
    }
    if req.wait == WaitUntil::No {
        return Err(req.not_acquired());
    }
    // Subscribed before the next attempt: a message from here on wakes us.
    let until = tokio::time::Instant::now() + budget;
    let subscriber = [&server.subscriber];
    let (mut released, mut turn) = tokio::select! {
        both = async {
            let released = Waiting::start(subscriber, release, until).await;
            let turn = match own {
                Some(own) => Some(Waiting::start(subscriber, own, until).await),
                None => None,
            };
            (released, turn)
        } => both,
        _ = req.wait.reached() => return Err(req.not_acquired()),
    };
    loop {
        let seen = (released.seen(), turn.as_ref().map(Waiting::seen));
        let step = raced(req, attempt(true)).await?;
        released.handled(seen.0);
        if let (Some(turn), Some(seen)) = (&turn, seen.1) {
            turn.handled(seen);
        }
        let hint = match step {
            Attempt::Won(won) => return Ok(won),
            Attempt::Wait(hint) => hint,
        };
        let heard = released.ready() > 0 && turn.as_ref().is_none_or(|t| t.ready() > 0);
        let more = match &mut turn {
            Some(turn) => tokio::select! {
                more = released.nap(hint, heard, req.wait) => more,
                more = turn.nap(hint, heard, req.wait) => more,
            },
            None => released.nap(hint, heard, req.wait).await,
        };
        if !more {
            return Err(req.not_acquired());
        }
    }
}

/// `attempt`, unless the wait ends first (dropping it, so its guard undoes
/// whatever it may have taken). A wait that already ended still gets its one
/// try.
async fn raced<T>(
    req: &AcquireRequest<'_>,
    attempt: impl Future<Output = Result<Attempt<T>, LockError>>,
) -> Result<Attempt<T>, LockError> {
    let race = req.wait != WaitUntil::No && req.wait.instant().is_none_or(|at| at > Instant::now());
    tokio::select! {
        outcome = attempt => outcome,
        _ = req.wait.reached(), if race => Err(req.not_acquired()),
    }
}
