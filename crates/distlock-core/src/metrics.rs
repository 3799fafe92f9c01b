//! What the lock lifecycle exports through the `metrics` crate's facade
//! (feature `metrics`): every histogram, gauge and counter. Every metric is
//! labelled by backend name and never by key: keys are user data, unbounded in
//! number and possibly sensitive.
//!
//! The metrics cfg lives here alone. Without the feature `Keys`, `Waiting` and
//! `Hold` are zero-sized and every method is an empty inline no-op, so the
//! acquire path carries no metrics code and call sites need no cfg of their own.

pub(crate) use export::*;

#[cfg(feature = "metrics")]
mod export {
    use crate::LossReason;
    use crate::outcome::Outcome;
    use ::metrics::{Key, Label, Level, Metadata, Unit, with_recorder};
    use ::metrics::{describe_counter, describe_gauge, describe_histogram};
    use std::time::Instant;

    /// What the `counter!` family would pass along, made once.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    const OUTCOMES: [Outcome; 5] = [
        Outcome::Acquired,
        Outcome::Busy,
        Outcome::Timeout,
        Outcome::Error,
        Outcome::Cancelled,
    ];

    /// A short, stable label for a loss reason (its `Display` is a sentence).
    fn loss_index(reason: LossReason) -> (usize, &'static str) {
        match reason {
            LossReason::Expired => (0, "expired"),
            LossReason::Revoked => (1, "revoked"),
            LossReason::SessionEnded => (2, "session_ended"),
            LossReason::MaxHoldReached => (3, "max_hold"),
        }
    }

    /// One lock client's metric keys, labelled with its backend once, so an
    /// event builds and allocates no labels. Each event still asks the current
    /// recorder for its handle (rather than caching handles), so a recorder
    /// installed after the client was made sees everything.
    #[derive(Debug)]
    pub struct Keys {
        acquire_total: [Key; 5],
        reentered: Key,
        acquire_wait: [Key; 5],
        renewals: Key,
        renewal_failures: Key,
        releases: Key,
        lost: [Key; 4],
        leases_held: Key,
        waiters: Key,
        hold: Key,
    }

    fn key(
        name: &'static str,
        backend: &'static str,
        extra: Option<(&'static str, &'static str)>,
    ) -> Key {
        let mut labels = vec![Label::from_static_parts("backend", backend)];
        labels.extend(extra.map(|(k, v)| Label::from_static_parts(k, v)));
        Key::from_parts(name, labels)
    }

    fn count(key: &Key) {
        with_recorder(|r| r.register_counter(key, &METADATA)).increment(1);
    }

    fn gauge_add(key: &Key, delta: f64) {
        with_recorder(|r| r.register_gauge(key, &METADATA)).increment(delta);
    }

    fn seconds_since(key: &Key, since: Instant) {
        with_recorder(|r| r.register_histogram(key, &METADATA)).record(since.elapsed());
    }

    /// When one acquire started, for its wait histogram.
    pub struct Waiting(Instant);

    /// When one lease was acquired, for its hold histogram.
    pub struct Hold(Instant);

    impl Keys {
        pub fn new(backend: &'static str) -> Self {
            describe();
            let by_outcome =
                |name| OUTCOMES.map(|o| key(name, backend, Some(("outcome", o.as_str()))));
            let lost = [
                LossReason::Expired,
                LossReason::Revoked,
                LossReason::SessionEnded,
                LossReason::MaxHoldReached,
            ]
            .map(|r| {
                key(
                    "distlock_leases_lost_total",
                    backend,
                    Some(("reason", loss_index(r).1)),
                )
            });
            Keys {
                acquire_total: by_outcome("distlock_acquire_total"),
                reentered: key(
                    "distlock_acquire_total",
                    backend,
                    Some(("outcome", "reentered")),
                ),
                acquire_wait: by_outcome("distlock_acquire_wait_seconds"),
                renewals: key("distlock_renewals_total", backend, None),
                renewal_failures: key("distlock_renewal_failures_total", backend, None),
                releases: key("distlock_releases_total", backend, None),
                lost,
                leases_held: key("distlock_leases_held", backend, None),
                waiters: key("distlock_waiters", backend, None),
                hold: key("distlock_hold_seconds", backend, None),
            }
        }

        pub fn acquire_started(&self, started: Instant) -> Waiting {
            gauge_add(&self.waiters, 1.0);
            Waiting(started)
        }

        /// Called exactly once per acquire, cancelled ones included.
        pub fn acquire_ended(&self, outcome: Outcome, waiting: &Waiting) {
            gauge_add(&self.waiters, -1.0);
            count(&self.acquire_total[outcome as usize]);
            seconds_since(&self.acquire_wait[outcome as usize], waiting.0);
        }

        pub fn reentered(&self) {
            count(&self.reentered);
        }

        pub fn renewed(&self) {
            count(&self.renewals);
        }

        pub fn renewal_failed(&self) {
            count(&self.renewal_failures);
        }

        pub fn released(&self) {
            count(&self.releases);
        }

        pub fn lost(&self, reason: LossReason) {
            count(&self.lost[loss_index(reason).0]);
        }

        pub fn hold_started(&self) -> Hold {
            gauge_add(&self.leases_held, 1.0);
            Hold(Instant::now())
        }

        /// Called exactly once per lease, as it stops being held.
        pub fn hold_ended(&self, hold: &Hold) {
            gauge_add(&self.leases_held, -1.0);
            seconds_since(&self.hold, hold.0);
        }
    }

    /// Units and help texts for exporters that show them (Prometheus' `# HELP`).
    /// Called per lock client: a recorder installed later misses them, harmlessly.
    fn describe() {
        describe_histogram!(
            "distlock_acquire_wait_seconds",
            Unit::Seconds,
            "Time from the start of an acquire to its outcome, by outcome."
        );
        describe_histogram!(
            "distlock_hold_seconds",
            Unit::Seconds,
            "Time a lease was held, from acquisition to release or loss."
        );
        describe_gauge!("distlock_leases_held", "Leases held now by this process.");
        describe_gauge!(
            "distlock_waiters",
            "Callers inside acquire now, waiting or in flight."
        );
        describe_counter!("distlock_acquire_total", "Acquires by outcome.");
        describe_counter!("distlock_renewals_total", "Successful lease renewals.");
        describe_counter!(
            "distlock_renewal_failures_total",
            "Failed renewal attempts, each retried until the local deadline."
        );
        describe_counter!("distlock_releases_total", "Leases released by their owner.");
        describe_counter!("distlock_leases_lost_total", "Leases lost, by reason.");
    }
}

#[cfg(not(feature = "metrics"))]
mod export {
    use crate::LossReason;
    use crate::outcome::Outcome;
    use std::time::Instant;

    #[derive(Debug)]
    pub struct Keys;
    pub struct Waiting;
    pub struct Hold;

    impl Keys {
        #[inline(always)]
        pub fn new(_: &'static str) -> Self {
            Keys
        }
        #[inline(always)]
        pub fn acquire_started(&self, _: Instant) -> Waiting {
            Waiting
        }
        #[inline(always)]
        pub fn acquire_ended(&self, _: Outcome, _: &Waiting) {}
        #[inline(always)]
        pub fn reentered(&self) {}
        #[inline(always)]
        pub fn renewed(&self) {}
        #[inline(always)]
        pub fn renewal_failed(&self) {}
        #[inline(always)]
        pub fn released(&self) {}
        #[inline(always)]
        pub fn lost(&self, _: LossReason) {}
        #[inline(always)]
        pub fn hold_started(&self) -> Hold {
            Hold
        }
        #[inline(always)]
        pub fn hold_ended(&self, _: &Hold) {}
    }
}
