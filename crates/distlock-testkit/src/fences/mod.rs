//! The fence conformance suite: the same cases against every fenced store
//! (memory, Redis, SQL, a third party's), named `<store>::<case>`.
//!
//! | case | property |
//! |---|---|
//! | [`stale_token_refused_and_nothing_changed`] | a lower token is refused with `StaleToken` naming both tokens; value and record unchanged |
//! | [`equal_and_higher_tokens_admitted`] | one holder writes many times; a newer holder's token is admitted and recorded |
//! | [`resources_are_independent`] | a high token on one resource does not fence another |
//! | [`below_floor_is_not_stale`] | "take one if at least one is left" answers sold out, distinct from stale |
//! | [`concurrent_writers_leave_only_admitted_effects`] | many writers with interleaved tokens: only admitted writes took effect, none after a higher one completed |
//! | [`bad_input_rejected_before_the_store`] | empty and over-long resources, oversized payloads: clear errors, nothing written |
//! | [`unreachable_store_is_unavailable`] | a store nobody answers at gives `Unavailable`, never a half write |
//!
//! A store joins by implementing [`FenceHarness`] and passing a [`FenceSpec`]
//! to [`trials`].

mod cases;

pub use cases::*;

use crate::cases::CaseResult;
use crate::runner::runtime;
use distlock_core::{BoxError, Fence, LockError};
use libtest_mimic::{Failed, Trial};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

/// A fenced store under test.
#[async_trait::async_trait]
pub trait FenceHarness: Send + Sync + std::fmt::Debug {
    /// A fence on the store. Several calls may share one connection or not;
    /// cases treat each as an independent writer.
    async fn fence(&self) -> Result<Arc<dyn Fence>, BoxError>;

    /// Connects a fence of the same kind to an address where no server answers
    /// (called only for a [`FenceSpec::remote`] store): an error here, or on
    /// the first write, must be [`LockError::Unavailable`].
    async fn unreachable(&self) -> Result<Arc<dyn Fence>, LockError>;
}

/// Starts a store's harness (and its server).
pub type StartFence = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn FenceHarness>, BoxError>> + Send>>
        + Send
        + Sync,
>;

/// A fenced store to run the suite against.
pub struct FenceSpec {
    /// The name in test names.
    pub name: String,
    /// Whether the store is reached over a network; [`unreachable_store_is_unavailable`]
    /// is ignored (visibly) for in-process stores.
    pub remote: bool,
    /// Starts the harness; called once, on first use.
    pub start: StartFence,
}

impl std::fmt::Debug for FenceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A fence case as the runner sees it.
pub type FenceCaseFn =
    for<'a> fn(&'a dyn FenceHarness) -> Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

macro_rules! fence_case {
    ($name:ident) => {
        (stringify!($name), (|h| Box::pin($name(h))) as FenceCaseFn)
    };
}

/// Every fence case, in the order of the table above.
pub fn all() -> Vec<(&'static str, FenceCaseFn)> {
    vec![
        fence_case!(stale_token_refused_and_nothing_changed),
        fence_case!(equal_and_higher_tokens_admitted),
        fence_case!(resources_are_independent),
        fence_case!(below_floor_is_not_stale),
        fence_case!(concurrent_writers_leave_only_admitted_effects),
        fence_case!(bad_input_rejected_before_the_store),
        fence_case!(unreachable_store_is_unavailable),
    ]
}

/// One trial per case for `spec`, sharing one harness. Stores listed in
/// `DISTLOCK_TEST_SKIP` are marked ignored, never passed.
pub fn trials(spec: FenceSpec) -> Vec<Trial> {
    let skipped = crate::runner::skip_list().contains(&spec.name.to_lowercase());
    let harness: Arc<OnceLock<Result<Arc<dyn FenceHarness>, String>>> = Arc::default();
    let start = Arc::new(spec.start);
    all()
        .into_iter()
        .map(|(case, run)| {
            let (harness, start, name) = (harness.clone(), start.clone(), spec.name.clone());
            Trial::test(format!("{}::{case}", spec.name), move || {
                let harness = harness
                    .get_or_init(|| {
                        runtime()
                            .block_on(start())
                            .map_err(|e| format!("starting the {name} fence store failed: {e}"))
                    })
                    .clone()?;
                runtime()
                    .block_on(run(&*harness))
                    .map_err(|e| Failed::from(e.message()))
            })
            .with_ignored_flag(
                skipped || (case == "unreachable_store_is_unavailable" && !spec.remote),
            )
        })
        .collect()
}
