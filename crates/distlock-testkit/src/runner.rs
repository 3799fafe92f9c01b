//! Turns the cases into named tests (`<backend>::<case>`) for a libtest-mimic
//! binary. One server set per backend, started on first use and shared by the
//! cases through key prefixes.

use crate::cases::{self, Case};
use crate::harness::{Harness, Hooks};
use distlock_core::{BoxError, Capabilities};
use libtest_mimic::{Failed, Trial};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tokio::runtime::Runtime;

/// Starts a backend's harness (and its servers).
pub type StartFn = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn Harness>, BoxError>> + Send>>
        + Send
        + Sync,
>;

/// A backend to run the suite against.
pub struct BackendSpec {
    /// The name in test names.
    pub name: String,
    /// Its capabilities, known before any server starts (cases are chosen from them).
    pub capabilities: Capabilities,
    /// The fault hooks its harness offers.
    pub hooks: Hooks,
    /// Starts the harness.
    pub start: StartFn,
}

impl std::fmt::Debug for BackendSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The runtime every case runs on: one, shared, so clients and servers outlive a
/// single case.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap_or_else(|e| {
                eprintln!("cannot start the tokio runtime for the conformance suite: {e}");
                std::process::exit(2)
            })
    })
}

/// Backends listed in `DISTLOCK_TEST_SKIP` (comma-separated), lowercased.
pub fn skip_list() -> Vec<String> {
    std::env::var("DISTLOCK_TEST_SKIP")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// One trial per case for `spec`. Cases the backend cannot run, and backends in
/// `DISTLOCK_TEST_SKIP`, are marked ignored, never passed.
pub fn trials(spec: BackendSpec) -> Vec<Trial> {
    let skipped = skip_list().contains(&spec.name.to_lowercase());
    let harness: Arc<OnceLock<Result<Arc<dyn Harness>, String>>> = Arc::default();
    let start = Arc::new(spec.start);
    cases::all()
        .into_iter()
        .map(|case| {
            let ignored = skipped || (case.needs)(&spec.capabilities, &spec.hooks).is_some();
            let (harness, start, name) = (harness.clone(), start.clone(), spec.name.clone());
            Trial::test(format!("{}::{}", spec.name, case.name), move || {
                let harness = harness
                    .get_or_init(|| {
                        runtime()
                            .block_on(start())
                            .map_err(|e| format!("starting the {name} harness failed: {e}"))
                    })
                    .clone()?;
                run_case(&case, harness)
            })
            .with_ignored_flag(ignored)
        })
        .collect()
}

fn run_case(case: &Case, harness: Arc<dyn Harness>) -> Result<(), Failed> {
    let outcome = runtime().block_on((case.run)(&*harness));
    outcome.map_err(|e| {
        let logs = harness.server_logs();
        if logs.is_empty() {
            Failed::from(e.message())
        } else {
            Failed::from(format!("{}\n--- server logs ---\n{logs}", e.message()))
        }
    })
}

/// Why each case would be ignored for these capabilities and hooks, for docs and
/// for `distlock check`.
pub fn ignored_cases(caps: &Capabilities, hooks: &Hooks) -> Vec<(&'static str, &'static str)> {
    cases::all()
        .into_iter()
        .filter_map(|case| (case.needs)(caps, hooks).map(|why| (case.name, why)))
        .collect()
}
