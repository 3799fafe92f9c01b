//! The chaos run must fail on a broken lock. Here every client has a store of
//! its own (a split brain: nobody ever waits) and every holder gets token 1,
//! so the fence admits everyone's writes: the run must report overlaps and
//! tokens out of order, print their windows, and write a history that reads
//! back to the same verdict.

use async_trait::async_trait;
use distlock_core::adapter::{AcquireRequest, Acquired, Backend, BackendLock, Ownership};
use distlock_core::memory::{MemoryBackend, MemoryHandle, MemoryStore};
use distlock_core::{BoxError, Capabilities, DynLock, FencingToken, LockError};
use distlock_testkit::Harness;
use distlock_testkit::chaos::{History, Meta, Pace, Plan, Requirement, check, run};
use distlock_testkit::harness::Hooks;
use distlock_testkit::memory::MemoryHarness;
use std::sync::Arc;
use std::time::Duration;

/// A memory backend on a store of its own that hands out token 1 every time.
struct SplitBrain(MemoryBackend);

#[async_trait]
impl Backend for SplitBrain {
    type Handle = MemoryHandle;

    fn name(&self) -> &'static str {
        "split-brain"
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<MemoryHandle>, LockError> {
        let acquired = self.0.acquire(req).await?;
        Ok(Acquired {
            token: FencingToken::new(1),
            ..acquired
        })
    }

    async fn renew(&self, handle: &MemoryHandle, ttl: Duration) -> Result<Ownership, LockError> {
        self.0.renew(handle, ttl).await
    }

    async fn release(&self, handle: &MemoryHandle) -> Result<Ownership, LockError> {
        self.0.release(handle).await
    }
}

struct SplitBrainHarness;

#[async_trait]
impl Harness for SplitBrainHarness {
    fn name(&self) -> &str {
        "split-brain"
    }

    fn capabilities(&self) -> Capabilities {
        MemoryHarness::capabilities()
    }

    fn hooks(&self) -> Hooks {
        Hooks::default()
    }

    async fn client(&self) -> Result<DynLock, BoxError> {
        Ok(Arc::new(BackendLock::new(SplitBrain(
            MemoryStore::new().backend(),
        ))))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_split_brain_fails_the_chaos_run_with_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        meta: Meta {
            trial: "split-brain::chaos".into(),
            exclusion: Requirement::Required,
            token_order: Requirement::Required,
            lost_slack: Duration::from_millis(250),
        },
        clients: 4,
        faulty_clients: 0,
        // One key: four holders at once, all the time.
        keys: 1,
        ttl: Duration::from_secs(1),
        duration: Duration::from_secs(2),
        pace: Pace::Busy,
        faults: Vec::new(),
        fault_gap: Duration::from_secs(1),
        history_file: dir.path().join("split-brain.history"),
    };
    let report = run(&SplitBrainHarness, &plan, None).await.unwrap();
    assert!(!report.passed(), "a split brain passed:\n{}", report.text());
    assert!(report.findings.count("overlap") > 0, "{}", report.text());
    assert!(
        report.findings.count("token-order") > 0,
        "{}",
        report.text()
    );
    let text = report.text();
    assert!(text.contains("FAILED: overlap on `chaos-"), "{text}");
    assert!(text.contains("window: "), "{text}");

    let read = History::read_file(&report.file).unwrap();
    assert_eq!(read, report.history);
    assert_eq!(check(&read), report.findings);
}
