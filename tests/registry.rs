//! Every registered backend has what the project promises for each: a docs
//! page, a conformance suite, a server launcher, a chaos trial, a compose file and a fuzz target
//! for its URLs.
//! A backend added to the facade's table without one of them fails here, with
//! the file or function to add.

use distlock::BackendKind;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The registered backends, the in-process one aside (it has no server, so no
/// page of its own nor URL fuzz target beyond the facade's).
fn backends() -> Vec<BackendKind> {
    let backends: Vec<_> = BackendKind::all()
        .filter(|kind| kind.name() != "memory")
        .collect();
    assert!(
        backends.iter().all(|kind| kind.enabled()),
        "run with --all-features: {:?} are off",
        backends
            .iter()
            .filter(|kind| !kind.enabled())
            .collect::<Vec<_>>()
    );
    backends
}

#[test]
fn every_backend_has_a_docs_page() {
    for kind in backends() {
        let page = repo().join(format!("docs/backends/{}.md", kind.name()));
        assert!(page.is_file(), "{kind}: write {}", page.display());
        let index = std::fs::read_to_string(repo().join("docs/index.md")).unwrap_or_default();
        assert!(
            index.contains(&format!("backends/{}.md", kind.name())),
            "{kind}: docs/index.md links no backends/{}.md",
            kind.name()
        );
    }
}

#[test]
fn every_backend_has_a_conformance_suite_a_launcher_and_a_chaos_trial() {
    let tested = distlock_tests::backends();
    for kind in BackendKind::all() {
        let Some(backend) = tested.iter().find(|backend| backend.name == kind.name()) else {
            panic!("{kind}: add its TestBackend to distlock_tests::backends() (tests/src/lib.rs)");
        };
        let suites: Vec<String> = (backend.suites)().into_iter().map(|s| s.name).collect();
        assert!(
            suites.first().is_some_and(|suite| suite == kind.name()),
            "{kind}: its first conformance suite must be `{kind}::`; have {suites:?}"
        );
        if kind.name() != "memory" {
            assert!(
                backend.launch.is_some() && !backend.fence_locks.is_empty(),
                "{kind}: its TestBackend needs a `launch` (a server the fence target starts) \
                 and at least one `fence_locks` entry (tests/src/lib.rs)"
            );
        }
        let trials: Vec<&str> = (backend.chaos)().iter().map(|spec| spec.trial).collect();
        let trial = format!("{kind}::chaos");
        assert!(
            trials.contains(&trial.as_str()),
            "{kind}: no chaos trial `{trial}`; have {trials:?}"
        );
    }
}

#[test]
fn every_backend_has_a_compose_file() {
    for kind in backends() {
        let file = repo().join(format!("docker/{}.yml", kind.name()));
        assert!(
            file.is_file(),
            "{kind}: add {} (its server on the local images, with a healthcheck) and its \
             services to tests/compose.rs",
            file.display()
        );
    }
}

#[test]
fn every_backend_has_a_url_fuzz_target() {
    for kind in backends() {
        let targets: Vec<PathBuf> = kind
            .schemes()
            .iter()
            .chain(&[kind.name()])
            .map(|scheme| repo().join(format!("fuzz/fuzz_targets/{scheme}_url.rs")))
            .collect();
        assert!(
            targets.iter().any(|target| target.is_file()),
            "{kind}: add a fuzz target for its URL parser, {}",
            targets[0].display()
        );
    }
}
