//! Waiting by polling, for `version_cas` and `unique_insert`: one attempt, then a
//! jittered exponential backoff capped at 250 ms and bounded by the holder's
//! remaining ttl, until the lock is won or the wait ends.

use crate::error::DbError;
use crate::lock::{Inner, MySqlHandle};
use crate::pool::{Conn, Statement};
use distlock_core::backend::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::{FencingToken, LockError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first pause after a failed attempt.
const FIRST_PAUSE: Duration = Duration::from_millis(4);
/// The longest pause: a released lock is seen within this (plus one round trip).
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What one attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// The lock is ours; `sent_at` was taken before the statement that won it.
    Won { token: u64, sent_at: Instant },
    /// Someone holds it for about `remaining` more (by the server clock).
    Held { remaining: Duration },
}

/// Pauses between attempts: doubling from 4 ms to 250 ms, each drawn in [½, 1] of
/// the current step so contenders spread out.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
}

impl Backoff {
    pub fn new() -> Self {
        Backoff { step: FIRST_PAUSE }
    }

    /// The next pause, never past the holder's expiry: a crashed holder is taken
    /// over as soon as the server lets us.
    pub fn pause(&mut self, holder_remaining: Duration) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(MAX_PAUSE);
        let jittered = step.mul_f64(rand::random_range(0.5..=1.0));
        jittered.min(holder_remaining + Duration::from_millis(1))
    }
}

/// Frees what an acquire may have won when it is dropped or fails before it knows:
/// once an acquiring statement is sent, its outcome is unknown until the reply.
/// Dropping it while armed spawns one compare-owner statement; the ttl is the
/// backstop if that cannot run.
pub(crate) struct Cleanup {
    inner: Arc<Inner>,
    undo: Option<Statement>,
    armed: bool,
}

impl Cleanup {
    /// A guard that runs `undo` (a compare-owner release) if dropped while armed.
    pub fn new(inner: &Arc<Inner>, undo: Statement) -> Self {
        Cleanup {
            inner: inner.clone(),
            undo: Some(undo),
            armed: false,
        }
    }

    /// A statement that may win the lock is about to go out.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// The outcome is known: nothing to undo (lost), or the handle owns it (won).
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (true, Some(undo)) = (self.armed, self.undo.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        runtime.spawn(async move {
            let outcome = match inner.pool.get().await {
                Ok(mut conn) => conn.execute(undo).await.map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "cleanup of an abandoned acquire failed; the ttl frees the lock");
            }
        });
    }
}

/// One contender's attempts on the lock, as the strategy defines them.
pub(crate) trait Contender: Send {
    /// One attempt on `conn`.
    fn attempt<'a>(&'a mut self, conn: &'a mut Conn) -> BoxFuture<'a, Result<Attempt, DbError>>;
}

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Attempts until won, `Busy` for `NoWait`, or `Timeout` at the deadline. Each
/// attempt runs on a pooled connection; a dropped future closes that connection
/// and leaves the cleanup to `undo`.
pub(crate) async fn acquire_polling(
    inner: &Arc<Inner>,
    req: &AcquireRequest<'_>,
    row: Vec<u8>,
    owner: String,
    undo: Statement,
    mut contender: impl Contender,
) -> Result<Acquired<MySqlHandle>, LockError> {
    let no_wait = req.wait == WaitUntil::NoWait;
    let mut cleanup = Cleanup::new(inner, undo);
    let mut backoff = Backoff::new();
    loop {
        let one_try = async {
            let mut conn = inner.pool.get().await?;
            cleanup.arm();
            contender.attempt(&mut conn).await
        };
        let outcome = tokio::select! {
            biased;
            outcome = one_try => outcome,
            _ = req.wait.reached(), if !no_wait => return Err(req.not_acquired()),
        };
        match outcome.map_err(|e| inner.error(e))? {
            Attempt::Won { token, sent_at } => {
                cleanup.disarm();
                let handle = MySqlHandle {
                    row,
                    owner,
                    fence: token,
                    session: None,
                };
                return Ok(Acquired {
                    handle,
                    token: FencingToken::new(token),
                    sent_at,
                });
            }
            Attempt::Held { remaining } => {
                cleanup.disarm();
                if no_wait {
                    return Err(req.not_acquired());
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.pause(remaining)) => {}
                    _ = req.wait.reached() => return Err(req.not_acquired()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_never_passes_the_holder_expiry() {
        let mut backoff = Backoff::new();
        let pauses: Vec<_> = (0..12)
            .map(|_| backoff.pause(Duration::from_secs(10)))
            .collect();
        assert!(pauses.iter().all(|p| *p <= MAX_PAUSE));
        assert!(pauses[11] >= MAX_PAUSE / 2, "reaches the cap: {pauses:?}");
        assert!(backoff.pause(Duration::from_millis(3)) <= Duration::from_millis(4));
    }
}
