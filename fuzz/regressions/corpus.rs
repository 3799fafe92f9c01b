//! Every committed seed of `corpus/TARGET/` replayed through its target's
//! function, with the normal toolchain: the checks the fuzzer runs (no panic,
//! no broken property, no secret shown), without libFuzzer or cargo-fuzz. CI
//! runs this and `regressions/main.rs`; fuzzing itself is `scripts/fuzz`.
//!
//! Run with `cargo test --manifest-path fuzz/Cargo.toml --test corpus`.

use distlock_fuzz::{cli, targets};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// Replays every file of `corpus/<target>/`; fails naming each input that
/// panicked, and when there is no input at all (a renamed directory would
/// otherwise pass unseen).
fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    inputs.sort();
    assert!(!inputs.is_empty(), "no seeds in {}", dir.display());
    let failed: Vec<String> = inputs
        .iter()
        .filter(|path| {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            catch_unwind(AssertUnwindSafe(|| run(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: {} of {} seeds fail (their panics are printed above): {failed:#?}",
        failed.len(),
        inputs.len()
    );
}

macro_rules! replays {
    ($($target:ident => $run:path),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), $run);
            }
        )*
    };
}

// The same pairs as `fuzz_targets/*.rs`.
replays! {
    key => targets::key,
    duration => targets::duration,
    lock_url => targets::lock_url,
    backend_url => targets::backend_url,
    cli_args => cli::cli_args,
}

/// Every target in `fuzz_targets/` has its replay above, so a new target's
/// seeds cannot go unreplayed.
#[test]
fn every_target_is_replayed() {
    let source = include_str!("corpus.rs");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        let Some(target) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        assert!(
            source.contains(&format!("    {target} => ")),
            "fuzz_targets/{target}.rs has no replay in regressions/corpus.rs"
        );
    }
}
