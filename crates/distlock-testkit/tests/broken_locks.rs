//! A suite that passes a broken lock is worthless. Each test here runs the cases
//! against a deliberately broken variant of the memory backend and asserts that
//! the cases guarding that property fail.

use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, BackendLock, Ownership};
use distlock_core::memory::{MemoryBackend, MemoryHandle, MemoryStore};
use distlock_core::{BoxError, Capabilities, DynLock, FencingToken, LockError, LockKey};
use distlock_testkit::cases::{self, CaseResult};
use distlock_testkit::memory::MemoryHarness;
use distlock_testkit::{Harness, Hooks};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Breakage {
    /// Every acquire succeeds, even on a held key.
    NeverExcludes,
    /// Every holder gets the same token.
    TokensDoNotIncrease,
    /// Release deletes the key whoever holds it.
    ReleaseIgnoresOwner,
    /// The server never expires a lock.
    IgnoresTtl,
}

struct BrokenBackend {
    inner: MemoryBackend,
    breakage: Breakage,
}

/// Private key suffixes for `NeverExcludes`, unique across all clients.
static UNIQUE: AtomicU64 = AtomicU64::new(0);

#[async_trait]
impl Backend for BrokenBackend {
    type Handle = MemoryHandle;

    fn name(&self) -> &'static str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<MemoryHandle>, LockError> {
        match self.breakage {
            Breakage::NeverExcludes => {
                // A fresh private key per acquisition: never contended.
                let n = UNIQUE.fetch_add(1, SeqCst);
                let private = LockKey::new(format!("{}#{n}", req.key))?;
                self.inner
                    .acquire(AcquireRequest {
                        key: &private,
                        ..req
                    })
                    .await
            }
            Breakage::TokensDoNotIncrease => {
                let acquired = self.inner.acquire(req).await?;
                Ok(Acquired {
                    token: FencingToken::new(1),
                    ..acquired
                })
            }
            Breakage::ReleaseIgnoresOwner => self.inner.acquire(req).await,
            Breakage::IgnoresTtl => {
                let forever = Duration::from_secs(3600);
                self.inner
                    .acquire(AcquireRequest {
                        ttl: forever,
                        ..req
                    })
                    .await
            }
        }
    }

    async fn renew(&self, handle: &MemoryHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let ttl = if self.breakage == Breakage::IgnoresTtl {
            Duration::from_secs(3600)
        } else {
            ttl
        };
        self.inner.renew(handle, ttl).await
    }

    async fn release(&self, handle: &MemoryHandle) -> Result<Ownership, LockError> {
        if self.breakage == Breakage::ReleaseIgnoresOwner {
            self.inner.store().delete(&handle.key);
            return Ok(Ownership::Held);
        }
        self.inner.release(handle).await
    }
    // No loss signal: like a backend without push, so only the server-side owner
    // check can protect a newer holder.
}

struct BrokenHarness {
    store: MemoryStore,
    breakage: Breakage,
}

#[async_trait]
impl Harness for BrokenHarness {
    fn name(&self) -> &str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        MemoryHarness::capabilities()
    }

    fn hooks(&self) -> Hooks {
        Hooks {
            delete_lock: true,
            residue: true,
            holder_process: false,
            ..Hooks::default()
        }
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(BackendLock::new(BrokenBackend {
            inner: self.store.backend(),
            breakage: self.breakage,
        })))
    }

    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(self.store.client()))
    }
}

type CaseFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = CaseResult> + Send + 'a>>;
type NamedCase = (&'static str, for<'a> fn(&'a dyn Harness) -> CaseFuture<'a>);

/// Runs `cases` concurrently against the broken variant and asserts that every
/// one fails.
async fn assert_all_fail(breakage: Breakage, cases: &[NamedCase]) {
    let harness = Arc::new(BrokenHarness {
        store: MemoryStore::new(),
        breakage,
    });
    let mut runs = tokio::task::JoinSet::new();
    for &(name, run) in cases {
        let harness = harness.clone();
        runs.spawn(async move { (name, run(&*harness).await) });
    }
    let mut passed = Vec::new();
    while let Some(joined) = runs.join_next().await {
        // A case that panics fails this test with the case's own panic.
        let (name, outcome) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        if outcome.is_ok() {
            passed.push(name);
        }
    }
    assert!(
        passed.is_empty(),
        "{breakage:?}: these cases passed a broken lock: {passed:?}"
    );
}

macro_rules! cases {
    ($($name:ident),+ $(,)?) => {
        &[$((stringify!($name), |h| Box::pin(cases::$name(h)))),+]
    };
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_that_never_excludes_fails_the_exclusion_cases() {
    assert_all_fail(
        Breakage::NeverExcludes,
        cases![
            try_acquire_when_held_returns_none,
            mutual_exclusion_under_contention,
            names_are_independent,
            waiter_wakes_promptly
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_that_do_not_increase_fail_the_fencing_cases() {
    assert_all_fail(
        Breakage::TokensDoNotIncrease,
        cases![
            acquire_release_basic,
            fencing_tokens_strictly_increase,
            fence_rejects_stale_holder,
            mutual_exclusion_under_contention
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_that_ignores_the_owner_fails_the_ownership_cases() {
    assert_all_fail(
        Breakage::ReleaseIgnoresOwner,
        cases![release_by_non_owner_is_noop],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_that_ignores_its_ttl_fails_the_expiry_cases() {
    assert_all_fail(
        Breakage::IgnoresTtl,
        // Only a holder that vanishes without releasing depends on server expiry:
        // a lease that merely stops renewing releases itself at its deadline.
        cases![ttl_expiry_frees_lock_after_crash],
    )
    .await;
}
