//! One client's work: acquire / fenced-write / release cycles, recorded.
//!
//! One cycle: pick a key, acquire it (auto or manual renewal, at random), then
//! a few times: "work" (see [`Pace`]), renew by hand when a manual lease is
//! below half its ttl, check `is_held()` and write `add(1)` to the key's
//! resource in the one shared [`MemoryFence`] with the lease's token; finally
//! release. The fence's counter value is the store's acceptance order. A task
//! per lease records the instant `lost()` fires. The fence lives in the test
//! process, out of reach of the faults: it is the safety net whose decisions
//! the checker reads.

use super::history::{Event, Op, Outcome, Recorder, RenewalMode};
use distlock_core::{
    AcquireOptions, DistributedLock, DynLock, Fence, FencedWrite, Lease, LockError, LockKey,
    MemoryFence, Renewal, Wait, WriteOutcome,
};
use rand::Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a holder spends its hold, between acquire and release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// One to four writes, the work before each mostly under ttl/20 and one
    /// time in five a quarter to half a ttl: many short cycles, and some long
    /// enough to need a renewal or to meet a fault mid-hold.
    Mixed,
    /// Ten to forty writes, 1–3 % of the ttl apart: a holder that writes all
    /// the time, so a window in which two believe they hold is seen if it
    /// exists, even a short one.
    Busy,
}

impl Pace {
    fn writes(self) -> u32 {
        match self {
            Pace::Mixed => rand::rng().random_range(1..=4),
            Pace::Busy => rand::rng().random_range(10..=40),
        }
    }

    fn work(self, ttl: Duration) -> Duration {
        let mut rng = rand::rng();
        let share = match self {
            Pace::Mixed if rng.random_bool(0.2) => rng.random_range(0.25..0.5),
            Pace::Mixed => rng.random_range(0.0..0.05),
            Pace::Busy => rng.random_range(0.01..0.03),
        };
        ttl.mul_f64(share)
    }
}

/// What every client task shares.
#[derive(Debug)]
pub(crate) struct Workload {
    pub recorder: Recorder,
    pub pace: Pace,
    pub fence: MemoryFence,
    pub keys: Vec<LockKey>,
    pub ttl: Duration,
}

impl Workload {
    /// The local deadline `lease` has now, on the history's clock.
    pub fn deadline(&self, lease: &Lease) -> u64 {
        self.recorder.at(Instant::now() + lease.remaining())
    }

    /// Records how an acquire invoked at `invoked` ended, as `event` builds it:
    /// held with a token and a local deadline, or else the outcome. The token,
    /// when held.
    pub fn record_acquire(
        &self,
        event: impl Fn(Op, u64, Option<u64>, Option<u64>, Outcome) -> Event,
        renewal: RenewalMode,
        invoked: u64,
        held: Result<(u64, u64), Outcome>,
    ) -> Option<u64> {
        let acquire = Op::Acquire {
            ttl: self.ttl,
            renewal,
        };
        let (token, deadline, outcome) = match held {
            Ok((token, deadline)) => (Some(token), Some(deadline), Outcome::Ok),
            Err(outcome) => (None, None, outcome),
        };
        self.recorder
            .record(event(acquire, invoked, token, deadline, outcome));
        token
    }

    /// Makes the fenced write that `write` (an event with its client, lease,
    /// key, token and invocation filled in) describes, and records it with its
    /// completion and outcome.
    pub async fn write(&self, write: Event) -> Outcome {
        let token = distlock_core::FencingToken::new(write.token.unwrap_or(0));
        let resource = format!("chaos/{}", write.key);
        let written = self
            .fence
            .write(&resource, token, FencedWrite::add(1))
            .await;
        let outcome = match written {
            Ok(WriteOutcome::Counter(n)) => Outcome::Admitted(u64::try_from(n).unwrap_or(0)),
            Ok(other) => Outcome::Error(format!("unexpected outcome {other:?}")),
            Err(LockError::StaleToken { highest, .. }) => Outcome::Stale(highest.get()),
            Err(e) => Outcome::Error(e.to_string()),
        };
        self.recorder.record(Event {
            completed: self.recorder.now(),
            outcome: outcome.clone(),
            ..write
        });
        outcome
    }
}

/// One client's cycles until `until`.
pub(crate) async fn client_loop(w: Arc<Workload>, id: String, lock: DynLock, until: Instant) {
    while Instant::now() < until {
        let key = w.keys[rand::rng().random_range(0..w.keys.len())].clone();
        if !cycle(&w, &id, &*lock, &key).await {
            // A server that is down refuses at once: pace the retries so an
            // outage does not flood the history.
            let pause = rand::rng().random_range(10..50);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}

/// One acquire / write / release cycle; false when the lock was not acquired.
async fn cycle(w: &Arc<Workload>, client: &str, lock: &dyn DistributedLock, key: &LockKey) -> bool {
    let manual = rand::rng().random_bool(0.5);
    let (renewal, mode) = if manual {
        (Renewal::Manual, RenewalMode::Manual)
    } else {
        (Renewal::Auto, RenewalMode::Auto)
    };
    let opts = AcquireOptions::new()
        .ttl(w.ttl)
        .wait(Wait::For(w.ttl * 2))
        .renewal(renewal);
    let event = w.recorder.lease_events(client, key);
    let invoked = w.recorder.now();
    let acquired = lock.acquire(key, &opts).await;
    let held = match &acquired {
        Ok(lease) => Ok((lease.token().get(), w.deadline(lease))),
        Err(LockError::Timeout { .. } | LockError::Busy { .. }) => Err(Outcome::NotAcquired),
        Err(other) => Err(Outcome::Error(other.to_string())),
    };
    let (Some(token), Ok(lease)) = (w.record_acquire(&event, mode, invoked, held), acquired) else {
        return false;
    };
    let base = event(Op::Lost, 0, Some(token), None, Outcome::Ok);
    let (done, watcher) = watch_lost(w, base.clone(), &lease);
    hold(w, &base, &lease, manual).await;
    let invoked = w.recorder.now();
    let outcome = match lease.release().await {
        Ok(()) => Outcome::Ok,
        Err(LockError::Lost { reason, .. }) => Outcome::Lost(format!("{reason:?}")),
        Err(e) => Outcome::Error(e.to_string()),
    };
    w.recorder
        .record(event(Op::Release, invoked, Some(token), None, outcome));
    let _ = done.send(());
    let _ = watcher.await;
    true
}

/// A task that records, as `template` with the time and reason filled in, the
/// instant `lease`'s `lost()` fires, until `done` is sent. A task of its own,
/// so the instant is when the signal fired, not when the cycle next looked.
fn watch_lost(
    w: &Arc<Workload>,
    template: Event,
    lease: &Lease,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    let lost = lease.lost();
    let w = w.clone();
    let watcher = tokio::spawn(async move {
        tokio::select! {
            // A loss found by the release itself still counts as seen.
            biased;
            reason = lost => {
                let at = w.recorder.now();
                w.recorder.record(Event {
                    invoked: at,
                    completed: at,
                    outcome: Outcome::Lost(format!("{reason:?}")),
                    ..template
                });
            }
            _ = finished => {}
        }
    });
    (done, watcher)
}

/// The writes of one hold; `base` names the client, lease, key and token.
async fn hold(w: &Workload, base: &Event, lease: &Lease, manual: bool) {
    for _ in 0..w.pace.writes() {
        // The work before the write: what lets a fault land in the middle of a hold.
        tokio::time::sleep(w.pace.work(w.ttl)).await;
        if manual && lease.is_held() && lease.remaining() < w.ttl / 2 {
            let invoked = w.recorder.now();
            let outcome = match lease.renew().await {
                Ok(()) => Outcome::Ok,
                Err(LockError::Lost { reason, .. }) => Outcome::Lost(format!("{reason:?}")),
                Err(e) => Outcome::Error(e.to_string()),
            };
            w.recorder.record(Event {
                op: Op::Renew,
                invoked,
                completed: w.recorder.now(),
                deadline: Some(w.deadline(lease)),
                outcome,
                ..base.clone()
            });
        }
        // Taken before the check: the lease was held at this instant or later.
        let checked_at = w.recorder.now();
        if !lease.is_held() {
            return;
        }
        let write = Event {
            op: Op::Write { checked: true },
            invoked: checked_at,
            deadline: Some(w.deadline(lease)),
            ..base.clone()
        };
        let outcome = w.write(write).await;
        if !matches!(outcome, Outcome::Admitted(_)) {
            // A refusal is final for this lease; an error ends the hold too.
            return;
        }
    }
}
