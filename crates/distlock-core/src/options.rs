//! Acquire options and their validation.

use crate::toolkit::{LockUrl, parse_duration};
use crate::{Capabilities, HolderMeta, LockError};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

mod min_hold;

/// How long `acquire` waits for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// One attempt; a held lock gives [`LockError::Busy`].
    No,
    /// Wait up to this long, then give [`LockError::Timeout`].
    For(Duration),
    /// Wait until acquired.
    Forever,
}

/// How the lease is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renew every ttl/3 with ±10% jitter (the default).
    Auto,
    /// Renew at this interval (jittered ±10%); it must be shorter than the ttl.
    Every(Duration),
    /// Never renew by itself; call [`crate::Lease::renew`]. The lease ends at its
    /// ttl unless renewed.
    Manual,
}

/// An owner identity for reentrancy: acquiring a key already held by the same owner
/// through the same lock client succeeds at once with the same token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// Longest owner identity, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Validates an owner identity: 1 to 128 bytes, no control characters.
    pub fn new(id: impl Into<String>) -> Result<Self, LockError> {
        let id = id.into();
        if id.is_empty() || id.len() > Self::MAX_LEN || id.chars().any(char::is_control) {
            return Err(LockError::invalid_options(format!(
                "owner identity must be 1 to {} bytes without control characters (got {} bytes)",
                Self::MAX_LEN,
                id.len()
            )));
        }
        Ok(Owner(id))
    }

    /// The identity as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Options for one acquisition. Build with [`AcquireOptions::new`] and the setters.
///
/// An option left unset takes the client's default: the one its URL or config
/// gave (`?ttl=5s`), else the built-in one (ttl 30 s, wait forever, automatic
/// renewal, no owner, no max or min hold). A setter always wins over both.
///
/// ```
/// use distlock_core::{AcquireOptions, Wait};
/// use std::time::Duration;
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Wait::For(Duration::from_secs(2)));
/// assert_eq!(opts.get_ttl(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    ttl: Option<Duration>,
    wait: Option<Wait>,
    renewal: Option<Renewal>,
    owner: Option<Owner>,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
    label: Option<String>,
}

impl AcquireOptions {
    /// The default ttl: 30 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

    /// Nothing set: every option is the client's default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Server-side expiry when renewal stops.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait for a held lock.
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How the lease is renewed.
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.renewal = Some(renewal);
        self
    }

    /// Owner identity for reentrancy.
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Longest time the lease may be held; then it is lost and released.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// A label stored with the holder's host and pid ([`crate::HolderMeta`]),
    /// shown by `Inspect::holder`, `distlock status` and the `Busy` error: at
    /// most 64 bytes of printable text, checked at acquire.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The holder label, if any.
    pub fn get_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The ttl (the built-in 30 s when unset).
    pub fn get_ttl(&self) -> Duration {
        self.ttl.unwrap_or(Self::DEFAULT_TTL)
    }

    /// The wait policy (forever when unset).
    pub fn get_wait(&self) -> Wait {
        self.wait.unwrap_or(Wait::Forever)
    }

    /// The renewal policy (automatic when unset).
    pub fn get_renewal(&self) -> Renewal {
        self.renewal.unwrap_or(Renewal::Auto)
    }

    /// The owner identity, if any.
    pub fn get_owner(&self) -> Option<&Owner> {
        self.owner.as_ref()
    }

    /// The max hold, if any.
    pub fn get_max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// These options, with each one left unset taken from `defaults`.
    ///
    /// ```
    /// use distlock_core::{AcquireOptions, Wait};
    /// use std::time::Duration;
    /// let from_url = AcquireOptions::new().ttl(Duration::from_secs(5)).wait(Wait::No);
    /// let mine = AcquireOptions::new().wait(Wait::Forever).or_defaults(&from_url);
    /// assert_eq!((mine.get_ttl(), mine.get_wait()), (Duration::from_secs(5), Wait::Forever));
    /// ```
    pub fn or_defaults(&self, defaults: &AcquireOptions) -> AcquireOptions {
        AcquireOptions {
            ttl: self.ttl.or(defaults.ttl),
            wait: self.wait.or(defaults.wait),
            renewal: self.renewal.or(defaults.renewal),
            owner: self.owner.clone().or_else(|| defaults.owner.clone()),
            max_hold: self.max_hold.or(defaults.max_hold),
            min_hold: self.min_hold.or(defaults.min_hold),
            label: self.label.clone().or_else(|| defaults.label.clone()),
        }
    }

    /// Takes the acquire defaults a lock URL may give, keeping these values where
    /// it has none: `ttl` (a duration), `wait` (`no`, `forever` or a duration),
    /// `renewal` (`auto`, `manual` or a duration between renewals),
    /// `max_hold` and `min_hold` (durations) and `label` (the holder label).
    /// Every scheme accepts them; the lock returned by
    /// `connect(url)` offers them as [`crate::DistributedLock::default_options`].
    ///
    /// ```
    /// use distlock_core::{AcquireOptions, Renewal, Wait};
    /// use distlock_core::toolkit::LockUrl;
    /// use std::time::Duration;
    /// let mut url = LockUrl::parse("redis", "redis://h/0?ttl=5s&wait=no&renewal=manual")?;
    /// let opts = AcquireOptions::new().read(&mut url)?;
    /// assert_eq!(opts.get_ttl(), Duration::from_secs(5));
    /// assert_eq!((opts.get_wait(), opts.get_renewal()), (Wait::No, Renewal::Manual));
    /// # Ok::<(), distlock_core::LockError>(())
    /// ```
    pub fn read(mut self, url: &mut LockUrl) -> Result<Self, LockError> {
        if let Some(ttl) = url.duration("ttl")? {
            self.ttl = Some(ttl);
        }
        if let Some(max_hold) = url.duration("max_hold")? {
            self.max_hold = Some(max_hold);
        }
        if let Some(min_hold) = url.duration("min_hold")? {
            self.min_hold = Some(min_hold);
        }
        if let Some(label) = url.string("label") {
            if let Some(why) = crate::meta::label_problem(&label) {
                return Err(url.param_error("label", &label, &why));
            }
            self.label = Some(label);
        }
        if let Some(value) = url.string("wait") {
            self.wait = Some(match value.as_str() {
                "no" => Wait::No,
                "forever" => Wait::Forever,
                duration => Wait::For(parse_duration(duration).map_err(|why| {
                    url.param_error(
                        "wait",
                        &value,
                        &format!("is not no, forever or a duration: {why}"),
                    )
                })?),
            });
        }
        if let Some(value) = url.string("renewal") {
            self.renewal = Some(match value.as_str() {
                "auto" => Renewal::Auto,
                "manual" => Renewal::Manual,
                every => Renewal::Every(parse_duration(every).map_err(|why| {
                    url.param_error(
                        "renewal",
                        &value,
                        &format!("is not auto, manual or a renew interval: {why}"),
                    )
                })?),
            });
        }
        Ok(self)
    }

    /// The interval between automatic renewals, before jitter; `None` for manual.
    pub fn renew_interval(&self) -> Option<Duration> {
        match self.get_renewal() {
            Renewal::Auto => Some(self.get_ttl() / 3),
            Renewal::Every(every) => Some(every),
            Renewal::Manual => None,
        }
    }

    /// Checks the options against a backend's limits. Nothing is clamped.
    pub fn validate(&self, caps: &Capabilities) -> Result<(), LockError> {
        let bad = |reason: String| Err(LockError::invalid_options(reason));
        let ttl = self.get_ttl();
        if ttl.is_zero() {
            return bad("ttl is zero; use a ttl longer than the longest pause you expect".into());
        }
        if ttl < caps.min_ttl {
            return bad(format!(
                "ttl {ttl:?} is below this backend's minimum of {:?}",
                caps.min_ttl
            ));
        }
        let granularity = caps.ttl_granularity.as_nanos();
        if granularity > 1 && !ttl.as_nanos().is_multiple_of(granularity) {
            return bad(format!(
                "ttl {ttl:?} is not a whole multiple of {:?}, which this backend requires",
                caps.ttl_granularity
            ));
        }
        if ttl > Duration::from_secs(365 * 24 * 3600) {
            return bad(format!(
                "ttl {ttl:?} is over a year; use a shorter ttl and renewal"
            ));
        }
        if let Renewal::Every(every) = self.get_renewal()
            && (every.is_zero() || every >= ttl)
        {
            return bad(format!(
                "renew interval {every:?} must be above zero and below the ttl {ttl:?} (ttl/3 is a good choice)"
            ));
        }
        if self.max_hold.is_some_and(|d| d.is_zero()) {
            return bad("max_hold is zero; leave it unset for no limit".into());
        }
        self.label
            .as_deref()
            .map_or(Ok(()), HolderMeta::check_label)?;
        self.validate_min_hold(caps)
    }
}

/// The acquire defaults of one client, shared by its lock and the primitives
/// offered beside it, so that the URL's defaults, set once, reach them all.
#[derive(Debug, Clone, Default)]
pub(crate) struct Defaults(Arc<RwLock<AcquireOptions>>);

impl Defaults {
    /// The defaults now.
    pub fn get(&self) -> AcquireOptions {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces them.
    pub fn set(&self, defaults: AcquireOptions) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = defaults;
    }

    /// `opts` with each unset option taken from these defaults.
    pub fn fill(&self, opts: &AcquireOptions) -> AcquireOptions {
        opts.or_defaults(&self.get())
    }
}

#[cfg(test)]
mod tests;
