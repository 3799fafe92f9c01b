//! The renewal watchdog: one task per lease (started by `keeper.rs`) that
//! renews it every interval, retries a failed renewal until the local
//! deadline, and ends the lease at the deadline, at `max_hold`, or when the
//! backend pushes a loss.

use super::shared::{Shared, Status};
use crate::LossReason;
use crate::backend::Ownership;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::sleep_until;

/// A lease's watchdog, with what it needs, before it is spawned (the loss
/// signal waits in [`Shared`]: a lease that ends first drops it then).
pub(crate) struct Watchdog {
    pub shared: Arc<Shared>,
    pub renew_every: Option<Duration>,
    pub max_hold_at: Option<Instant>,
    pub began: Instant,
}

/// Keeps the lease alive and watches for its end. One task per lease that
/// outlives the keeper's grace; it exits when the lease is released, dropped
/// or lost.
pub(crate) async fn watchdog(dog: Watchdog) {
    let Watchdog {
        shared,
        renew_every,
        max_hold_at,
        began,
    } = dog;
    let mut status = shared.status.subscribe();
    let mut loss = shared
        .take_loss()
        .unwrap_or_else(|| Box::pin(std::future::pending()));
    let mut next_renewal = renew_every.map(|every| began + jittered(every));
    let retry_delay = (shared.ttl / 20).clamp(Duration::from_millis(10), Duration::from_secs(1));
    // Failed attempts in a row: only the first warns, so an outage does not
    // warn every ttl/20 per lease; the loss that may follow warns again.
    let mut failures: u32 = 0;
    loop {
        let deadline = shared.deadline();
        // One timer, for whichever comes first of the deadline, max_hold and
        // the next renewal: each timer is a lock and an entry in the wheel.
        let (mut at, mut due) = (deadline, Event::Deadline);
        for (when, event) in [
            (max_hold_at, Event::Lost(LossReason::MaxHoldReached)),
            (next_renewal, Event::Renew),
        ] {
            if let Some(when) = when.filter(|when| *when < at) {
                (at, due) = (when, event);
            }
        }
        let event = tokio::select! {
            _ = status.wait_for(|s| *s != Status::Held) => return,
            reason = &mut loss => Event::Lost(reason),
            _ = sleep_until(at.into()) => due,
        };
        match event {
            // An owner-checked release even when the backend reported the key
            // gone: a push signal can also come from a broken watch or session
            // while the key survives (and a shared session may keep it alive
            // once the network heals), and releasing a key that is gone is a
            // no-op.
            Event::Lost(reason) => {
                if shared.mark_lost(reason) {
                    shared.release_after_loss().await;
                }
                return;
            }
            // A manual renew may have moved the deadline while we slept.
            Event::Deadline if Instant::now() < shared.deadline() => {}
            Event::Deadline => {
                if shared.mark_lost(LossReason::Expired) {
                    shared.release_after_loss().await;
                }
                return;
            }
            Event::Renew => {
                let sent_at = Instant::now();
                let outcome = tokio::select! {
                    _ = status.wait_for(|s| *s != Status::Held) => return,
                    reason = &mut loss => Some(Err(reason)),
                    // Give up on this attempt at the deadline; the loop then sees it.
                    _ = sleep_until(deadline.into()) => None,
                    outcome = shared.ops.renew(shared.renew_ttl(sent_at)) => Some(Ok(outcome)),
                };
                let outcome = match outcome {
                    Some(Err(reason)) => {
                        if shared.mark_lost(reason) {
                            shared.release_after_loss().await;
                        }
                        return;
                    }
                    Some(Ok(outcome)) => Some(outcome),
                    None => None,
                };
                next_renewal = match outcome {
                    Some(Ok(Ownership::Held)) => {
                        shared.extend(sent_at);
                        shared.metrics.renewed();
                        failures = 0;
                        renew_every.map(|every| sent_at + jittered(every))
                    }
                    Some(Ok(Ownership::NotHeld)) => {
                        shared.mark_lost(LossReason::Revoked);
                        return;
                    }
                    Some(Err(error)) => {
                        shared.metrics.renewal_failed();
                        failures = failures.saturating_add(1);
                        let (backend, key) = (shared.backend, &shared.key);
                        if failures == 1 {
                            tracing::warn!(backend, key = %key, %error, failures, "renewal failed; retrying until the deadline");
                        } else {
                            tracing::debug!(backend, key = %key, %error, failures, "renewal failed; retrying until the deadline");
                        }
                        Some(Instant::now() + jittered(retry_delay))
                    }
                    None => Some(Instant::now()),
                };
            }
        }
    }
}

enum Event {
    Lost(LossReason),
    Deadline,
    Renew,
}

fn jittered(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}
