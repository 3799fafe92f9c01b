//! What a case works with: its own key prefix on the harness, clients,
//! timings derived from the backend's capabilities, and bounded waits.

use super::{CaseError, CaseResult, ensure};
use crate::harness::Harness;
use distlock_core::{AcquireOptions, DynElection, DynLock, DynSemaphore, LockKey, Wait, Wake};
use std::future::Future;
use std::time::{Duration, Instant};

/// One case's view of the harness: its own random key prefix and the timings
/// derived from the backend's capabilities.
pub struct Scope<'a> {
    /// The harness.
    pub h: &'a dyn Harness,
    prefix: String,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("harness", &self.h.name())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl<'a> Scope<'a> {
    /// A fresh scope for `case`.
    pub fn new(h: &'a dyn Harness, case: &str) -> Self {
        let prefix = format!("dlt{:08x}/{case}/", rand::random::<u32>());
        Scope { h, prefix }
    }

    /// The prefix all this case's keys start with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A key under this case's prefix.
    pub fn key(&self, name: &str) -> Result<LockKey, CaseError> {
        Ok(LockKey::new(format!("{}{name}", self.prefix))?)
    }

    /// A new independent client.
    pub async fn client(&self) -> Result<DynLock, CaseError> {
        Ok(self.h.client().await?)
    }

    /// A new independent semaphore client (the backend offers semaphores).
    pub async fn semaphore(&self) -> Result<DynSemaphore, CaseError> {
        let client = self.client().await?;
        client
            .semaphore()
            .ok_or_else(|| CaseError::msg(format!("{} offers no semaphore", client.name())))
    }

    /// A new independent election client (the backend offers elections).
    pub async fn election(&self) -> Result<DynElection, CaseError> {
        let client = self.client().await?;
        client
            .election()
            .ok_or_else(|| CaseError::msg(format!("{} offers no election", client.name())))
    }

    /// The shortest ttl worth testing expiry with on this backend: at least
    /// 1 s (shorter ones leave too little room for scheduling delays on a busy
    /// machine), the backend minimum, rounded up to its granularity.
    pub fn short_ttl(&self) -> Duration {
        let caps = self.h.capabilities();
        let ttl = caps.min_ttl.max(Duration::from_secs(1));
        let step = caps.ttl_granularity.as_nanos().max(1);
        let nanos = ttl.as_nanos().div_ceil(step) * step;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Options with a ttl long enough that nothing expires during the case.
    pub fn long(&self) -> AcquireOptions {
        AcquireOptions::new()
            .ttl(Duration::from_secs(30))
            .wait(Wait::For(Duration::from_secs(20)))
    }

    /// Options with [`Scope::short_ttl`].
    pub fn short(&self) -> AcquireOptions {
        self.long().ttl(self.short_ttl())
    }

    /// How soon a waiter must see a release: push backends wake at once, polling
    /// ones within their backoff cap. Generous, because the machine is shared.
    pub fn handoff_bound(&self) -> Duration {
        match self.h.capabilities().wake {
            Wake::Push => Duration::from_millis(1500),
            Wake::Poll => Duration::from_millis(2500),
        }
    }

    /// Checks over `window` that `key` stays held: no attempt by `client` gets it.
    pub async fn stays_held(
        &self,
        client: &DynLock,
        key: &LockKey,
        window: Duration,
    ) -> CaseResult {
        let until = Instant::now() + window;
        loop {
            let stolen = client.try_acquire(key, &self.long()).await?;
            ensure!(
                stolen.is_none(),
                "`{key}` was acquired while another lease held it"
            );
            if Instant::now() >= until {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the residue under this case's prefix is `expected`, failing at
    /// `within`. Cancelled acquires may clean up in the background, hence the wait.
    pub async fn expect_residue(&self, expected: usize, within: Duration) -> CaseResult {
        if !self.h.hooks().residue {
            return Ok(());
        }
        self.poll_residue("lock", expected, within, || self.h.residue(&self.prefix))
            .await
    }

    /// Polls `residue` until it lists `expected` artifacts, failing at `within`
    /// with what it found; `what` names the primitive in the message.
    pub(super) async fn poll_residue<F, Fut, E>(
        &self,
        what: &str,
        expected: usize,
        within: Duration,
        residue: F,
    ) -> CaseResult
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Vec<String>, E>>,
        E: std::fmt::Display,
    {
        let deadline = Instant::now() + within;
        loop {
            let found = residue().await?;
            if found.len() == expected {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "expected {expected} {what} artifacts under {}, found {} after {within:?}: {found:?}",
                self.prefix,
                found.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Awaits `fut` for at most `limit`, failing the case with `what` on timeout.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> Result<T, CaseError> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| CaseError::msg(format!("{what}: not done within {limit:?}")))
}

/// True if `fut` is still pending after `wait`.
pub async fn still_pending<T>(wait: Duration, fut: impl Future<Output = T>) -> bool {
    tokio::time::timeout(wait, fut).await.is_err()
}
