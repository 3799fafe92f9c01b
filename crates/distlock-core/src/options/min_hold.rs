//! The minimum hold (what ShedLock calls `lockAtLeastFor`): the option and
//! its checks. The lease lifecycle keeps it (`lease/shared.rs`): the first
//! grant asks for at least the minimum hold, every renewal before it ends
//! keeps the server's expiry at or past it, and a release before it ends
//! sets the expiry to the time left instead of deleting.

use super::AcquireOptions;
use crate::{Capabilities, LockError};
use std::time::Duration;

impl AcquireOptions {
    /// Keeps the lock held for at least this long from its grant, whatever
    /// the holder does: a release (or a drop) before then leaves the lock
    /// held on the server until `acquired + min_hold`, when the server frees
    /// it by itself, and a holder whose process dies sooner blocks others
    /// until then too. For a job that must run at most once per period
    /// across a fleet, however quickly it finishes.
    ///
    /// A backend that cannot keep a lock past its holder's process refuses it
    /// with [`LockError::InvalidOptions`] giving the reason
    /// ([`Capabilities::min_hold`]).
    ///
    /// ```
    /// use distlock_core::AcquireOptions;
    /// use std::time::Duration;
    /// let opts = AcquireOptions::new().min_hold(Duration::from_secs(60));
    /// assert_eq!(opts.get_min_hold(), Some(Duration::from_secs(60)));
    /// ```
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// The min hold, if any.
    pub fn get_min_hold(&self) -> Option<Duration> {
        self.min_hold
    }

    /// The ttl the first grant asks the server for: the min hold where it is
    /// longer than the ttl, so the server's own expiry covers it even if the
    /// holder dies at once. The lease itself still believes in the ttl only.
    pub(crate) fn grant_ttl(&self) -> Duration {
        self.get_ttl().max(self.min_hold.unwrap_or_default())
    }

    pub(super) fn validate_min_hold(&self, caps: &Capabilities) -> Result<(), LockError> {
        let Some(min_hold) = self.min_hold else {
            return Ok(());
        };
        let bad = |reason: String| Err(LockError::invalid_options(reason));
        if min_hold.is_zero() {
            return bad("min_hold is zero; leave it unset for no minimum hold".into());
        }
        if let Some(why) = caps.min_hold.why_not() {
            return bad(format!("min_hold cannot be kept by this backend: {why}"));
        }
        if min_hold > Duration::from_secs(365 * 24 * 3600) {
            return bad(format!("min_hold {min_hold:?} is over a year"));
        }
        let granularity = caps.ttl_granularity.as_nanos();
        if granularity > 1 && !min_hold.as_nanos().is_multiple_of(granularity) {
            return bad(format!(
                "min_hold {min_hold:?} is not a whole multiple of {:?}, which this backend requires",
                caps.ttl_granularity
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Support;
    use crate::toolkit::LockUrl;

    fn reason(opts: &AcquireOptions, caps: &Capabilities) -> String {
        match opts.validate(caps) {
            Err(LockError::InvalidOptions { reason }) => reason,
            other => panic!("expected InvalidOptions, got {other:?}"),
        }
    }

    const OFFERED: Capabilities = Capabilities::new().min_hold(Support::Offered);

    #[test]
    fn min_hold_is_refused_with_the_backends_reason() {
        let opts = AcquireOptions::new().min_hold(Duration::from_secs(5));
        let refusing =
            Capabilities::new().min_hold(Support::NotOffered("the lock dies with its session"));
        let why = reason(&opts, &refusing);
        assert!(
            why.contains("min_hold") && why.contains("dies with its session"),
            "{why}"
        );
        assert!(opts.validate(&OFFERED).is_ok());
        let zero = AcquireOptions::new().min_hold(Duration::ZERO);
        assert!(reason(&zero, &OFFERED).contains("zero"));
        let coarse = OFFERED.ttl_granularity(Duration::from_secs(1));
        let odd = AcquireOptions::new().min_hold(Duration::from_millis(1500));
        assert!(reason(&odd, &coarse).contains("whole multiple"));
    }

    #[test]
    fn the_grant_covers_the_longer_of_ttl_and_min_hold() {
        let ttl = Duration::from_secs(10);
        let opts = AcquireOptions::new().ttl(ttl);
        assert_eq!(opts.grant_ttl(), ttl);
        assert_eq!(opts.clone().min_hold(ttl / 2).grant_ttl(), ttl);
        assert_eq!(opts.min_hold(ttl * 6).grant_ttl(), ttl * 6);
    }

    #[test]
    fn a_url_gives_a_default_min_hold_that_a_setter_overrides() -> Result<(), LockError> {
        let mut url = LockUrl::parse("redis", "redis://h/0?min_hold=30s")?;
        let defaults = AcquireOptions::new().read(&mut url)?;
        assert_eq!(defaults.get_min_hold(), Some(Duration::from_secs(30)));
        let unset = AcquireOptions::new().or_defaults(&defaults);
        assert_eq!(unset.get_min_hold(), Some(Duration::from_secs(30)));
        let mine = AcquireOptions::new().min_hold(Duration::from_secs(2));
        let set = mine.or_defaults(&defaults);
        assert_eq!(set.get_min_hold(), Some(Duration::from_secs(2)));
        let mut bad = LockUrl::parse("redis", "redis://h/0?min_hold=soon")?;
        assert!(AcquireOptions::new().read(&mut bad).is_err());
        Ok(())
    }
}
