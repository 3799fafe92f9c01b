//! Every registered backend has what the project promises for each: a docs
//! page, a conformance suite, a server launcher, a chaos trial, a compose file and a URL
//! parser for the fuzz target that walks the registry.
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
        let files = [
            repo().join(format!("docker/{}.yml", kind.name())),
            repo().join(format!("docker/images/{}/compose.yml", kind.name())),
        ];
        assert!(
            files.iter().any(|file| file.is_file()),
            "{kind}: add {} (its server on the local image, with a healthcheck, its \
             `x-distlock-test-url` and a check.sh beside it for scripts/test-compose)",
            files[1].display()
        );
    }
}

/// The fuzz target `backend_url` reads every scheme through its backend's
/// `Registration::parse`: that must be the parser `connect` uses, which refuses
/// an unknown parameter by name, not a stand-in that accepts anything.
#[test]
fn every_backend_registers_its_url_parser_for_the_fuzzer() {
    for kind in backends() {
        let registration = kind.registration().expect("enabled");
        for scheme in kind.schemes() {
            let url = format!("{scheme}://127.0.0.1/x?fuzz_probe_parameter=1");
            let error = registration
                .parse(&url)
                .expect_err(&format!("{kind}: {url} parsed"));
            assert!(
                matches!(error, distlock::LockError::Config { .. })
                    && error.to_string().contains("fuzz_probe_parameter"),
                "{kind}: {url}: {error}"
            );
        }
    }
    let target = repo().join("fuzz/fuzz_targets/backend_url.rs");
    assert!(target.is_file(), "{} is gone", target.display());
}
