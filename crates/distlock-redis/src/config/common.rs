//! What `RedisConfig` and `RedlockConfig` share: where keys live, the acquire
//! defaults, the timeouts and the restart guard.

use super::RedisConfig;
use crate::keys::{DEFAULT_NAMESPACE, validate_namespace};
use distlock_core::toolkit::{DEFAULT_STATE_TTL, LockUrl, Timeouts, check_state_ttl};
use distlock_core::{AcquireOptions, Capabilities, LockError};
use std::time::Duration;

/// What both configs share: where keys live, the acquire defaults, the
/// timeouts, the restart guard and how long idle state is kept.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub namespace: String,
    pub defaults: AcquireOptions,
    pub timeouts: Timeouts,
    pub restart_guard: Option<Duration>,
    pub state_ttl: Duration,
}

impl Common {
    pub fn new(timeout: Duration) -> Self {
        Common {
            namespace: DEFAULT_NAMESPACE.into(),
            defaults: AcquireOptions::new(),
            timeouts: Timeouts::new(RedisConfig::DEFAULT_CONNECT_TIMEOUT, timeout),
            restart_guard: None,
            state_ttl: DEFAULT_STATE_TTL,
        }
    }

    /// Takes `namespace`, the acquire defaults (`ttl`, `wait`, `renewal`,
    /// `max_hold`), `connect_timeout`, `timeout`, `restart_guard` and
    /// `state_ttl` from `url` (old timeout spellings are refused).
    pub fn read(&mut self, url: &mut LockUrl) -> Result<(), LockError> {
        if let Some(namespace) = url.string("namespace") {
            self.namespace = namespace;
        }
        self.defaults = std::mem::take(&mut self.defaults).read(url)?;
        self.timeouts = self.timeouts.read(url)?;
        self.restart_guard = url.duration("restart_guard")?.or(self.restart_guard);
        self.state_ttl = url.duration("state_ttl")?.unwrap_or(self.state_ttl);
        Ok(())
    }

    /// Checks what builder methods may have set wrong (URLs refuse zero already).
    pub fn validate(
        &self,
        backend: &'static str,
        capabilities: &Capabilities,
    ) -> Result<(), LockError> {
        validate_namespace(backend, &self.namespace)?;
        self.timeouts.validate(backend)?;
        check_state_ttl(backend, self.state_ttl)?;
        if let Some(guard) = self.restart_guard {
            check_timeout(backend, "restart_guard", guard)?;
            if guard < self.defaults.get_ttl() {
                return Err(LockError::config(
                    backend,
                    format!(
                        "restart_guard {guard:?} is shorter than the default ttl {:?}: a lease \
                         taken before a restart could outlive the guard; set restart_guard to \
                         at least the longest ttl in use",
                        self.defaults.get_ttl()
                    ),
                ));
            }
        }
        self.defaults
            .validate(capabilities)
            .map_err(|e| LockError::config(backend, format!("acquire defaults: {e}")))
    }
}

pub(crate) fn check_timeout(
    backend: &'static str,
    name: &str,
    value: Duration,
) -> Result<(), LockError> {
    if value.is_zero() {
        return Err(LockError::config(
            backend,
            format!("{name} is zero; give it a positive duration"),
        ));
    }
    Ok(())
}
