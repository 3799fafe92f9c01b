//! One retry and poll pacing for every loop in every adapter.

use crate::backend::WaitUntil;
use std::time::Duration;

/// Jittered, exponential, capped pauses between attempts.
///
/// Each pause is drawn in [½, 1] of the current step, and the step doubles up to
/// `cap`: contenders spread out instead of retrying in lockstep, and a long wait
/// polls at most once per `cap`.
///
/// ```
/// use distlock_core::toolkit::Backoff;
/// use std::time::Duration;
/// let mut backoff = Backoff::new(Duration::from_millis(4), Duration::from_millis(250));
/// let first = backoff.next_delay();
/// assert!(first >= Duration::from_millis(2) && first <= Duration::from_millis(4));
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    step: Duration,
}

impl Backoff {
    /// Starts at `first`, doubling to at most `cap` (`cap` below `first` is
    /// raised to `first`).
    pub fn new(first: Duration, cap: Duration) -> Self {
        Backoff {
            first,
            cap: cap.max(first),
            step: first,
        }
    }

    /// The next pause, advancing the step.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(self.cap);
        step.mul_f64(rand::random_range(0.5..=1.0))
    }

    /// Back to the first step, after a success.
    pub fn reset(&mut self) {
        self.step = self.first;
    }

    /// Sleeps for the next pause, but no longer than `bound` nor past `until`.
    /// Returns `false` when `until` came first (the caller's wait is over).
    pub async fn pause(&mut self, bound: Duration, until: WaitUntil) -> bool {
        let delay = self.next_delay().min(bound);
        let wake = tokio::time::Instant::now() + delay;
        match until.instant() {
            Some(deadline) if tokio::time::Instant::from_std(deadline) <= wake => {
                tokio::time::sleep_until(deadline.into()).await;
                false
            }
            _ => {
                tokio::time::sleep_until(wake).await;
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn doubles_to_the_cap_with_jitter_and_resets() {
        let (first, cap) = (Duration::from_millis(4), Duration::from_millis(250));
        let mut backoff = Backoff::new(first, cap);
        let pauses: Vec<_> = (0..12).map(|_| backoff.next_delay()).collect();
        assert!(pauses.iter().all(|p| *p <= cap), "{pauses:?}");
        assert!(pauses[0] >= first / 2 && pauses[0] <= first, "{pauses:?}");
        assert!(pauses[11] >= cap / 2, "reaches the cap: {pauses:?}");
        backoff.reset();
        assert!(backoff.next_delay() <= first);
    }

    #[tokio::test]
    async fn pause_stops_at_the_bound_and_at_the_deadline() {
        // Steps of 100 s: any pause that ends well before that was cut short.
        let mut backoff = Backoff::new(Duration::from_secs(100), Duration::from_secs(100));
        let start = Instant::now();
        assert!(
            backoff
                .pause(Duration::from_millis(5), WaitUntil::Forever)
                .await
        );
        assert!(start.elapsed() >= Duration::from_millis(5));
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(
            !backoff
                .pause(Duration::MAX, WaitUntil::Deadline(deadline))
                .await
        );
        assert!(Instant::now() >= deadline);
        assert!(!backoff.pause(Duration::MAX, WaitUntil::No).await);
        assert!(
            start.elapsed() < Duration::from_secs(50),
            "{:?}",
            start.elapsed()
        );
    }
}
