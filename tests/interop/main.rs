//! Interop with other ecosystems' real clients, one named test each:
//! `curator::<case>` (Apache Curator's recipes, through a small Java holder
//! compiled at test time from `CuratorHolder.java`) against the ZooKeeper
//! adapter, and `etcdctl::<case>` (etcd's own `etcdctl lock`) against the etcd
//! adapter. Run one side with `cargo test -p distlock-tests --all-features --test
//! interop -- curator::`.

#[cfg(feature = "zookeeper")]
mod curator;
#[cfg(feature = "etcd")]
mod etcdctl;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
mod inspect;
#[cfg(feature = "zookeeper")]
mod java;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
mod sections;

use distlock_testkit::cases::CaseResult;
use distlock_testkit::runner::{runtime, skip_list};
use libtest_mimic::{Failed, Trial};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

/// The servers and the compiled Java holder, each made on first use and shared
/// by every case (keys carry a random suffix); dropped at the end of the run.
#[derive(Debug, Default)]
pub struct Shared {
    #[cfg(feature = "zookeeper")]
    zookeeper: tokio::sync::OnceCell<distlock_testkit::servers::ZooKeeperServer>,
    #[cfg(feature = "zookeeper")]
    curator: tokio::sync::OnceCell<java::Curator>,
    #[cfg(feature = "etcd")]
    etcd: tokio::sync::OnceCell<distlock_testkit::servers::EtcdServer>,
}

/// A case: an async function of the shared state.
type Case = fn(Arc<Shared>) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// A named case and the backend it runs on.
struct Named {
    /// `<module>::<case>`.
    name: &'static str,
    /// The backend whose adapter it drives, for `DISTLOCK_TEST_SKIP`.
    backend: &'static str,
    case: Case,
}

/// The cases of a module, named `<module>::<case>`, on `backend`.
#[allow(unused_macros)] // Unused when no backend feature is on.
macro_rules! cases {
    ($module:ident on $backend:literal: $($case:ident),* $(,)?) => {
        vec![$($crate::Named {
            name: concat!(stringify!($module), "::", stringify!($case)),
            backend: $backend,
            case: |shared| Box::pin($crate::$module::$case(shared)),
        }),*]
    };
}
#[allow(unused_imports)]
pub(crate) use cases;

/// A fresh lock name without `/` or `%`, so the other client's path or key
/// for it is the adapter's.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
fn unique(name: &str) -> Result<distlock_core::LockKey, distlock_testkit::cases::CaseError> {
    Ok(distlock_core::LockKey::new(format!(
        "{name}-{:08x}",
        rand::random::<u32>()
    ))?)
}

fn main() -> ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    // The cases wait on servers and child processes; the JVMs cost CPU, so not too many.
    args.test_threads.get_or_insert(4);
    let shared = Arc::new(Shared::default());
    #[allow(unused_mut)]
    let mut cases: Vec<Named> = Vec::new();
    #[cfg(feature = "zookeeper")]
    cases.extend(curator::cases());
    #[cfg(feature = "etcd")]
    cases.extend(etcdctl::cases());
    // A backend skipped by `DISTLOCK_TEST_SKIP` shows its cases as ignored.
    let skipped = skip_list();
    let trials = cases
        .into_iter()
        .map(
            |Named {
                 name,
                 backend,
                 case,
             }| {
                let shared = shared.clone();
                Trial::test(name, move || {
                    runtime()
                        .block_on(case(shared))
                        .map_err(|e| Failed::from(e.message()))
                })
                .with_ignored_flag(skipped.iter().any(|s| s == backend))
            },
        )
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
