//! Rules of ARCHITECTURE.md that a test can hold: no module imports itself
//! back (per crate, among the top-level modules and among the children of
//! every module directory), no source file over 400 lines, every path the page
//! names exists, every adapter crate has the files of the adapter contract, no
//! dependency needs protoc at build time, and the fuzz crate compiles every
//! module of the CLI.

// Reads only this repository's files: one that cannot be read is itself a
// failure to report, so the helpers outside `#[test]` fns may expect.
#![allow(clippy::expect_used)]

#[path = "architecture/doc.rs"]
mod doc;
#[path = "architecture/graph.rs"]
mod graph;
#[path = "architecture/imports.rs"]
mod imports;
#[path = "architecture/lexer.rs"]
mod lexer;

use graph::Crate;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 400;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every crate under `crates/` with the path of its `src/`, plus this package.
fn crates() -> Vec<(String, PathBuf)> {
    let root = workspace();
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(root.join("crates"))
        .expect("the workspace has crates/")
        .filter_map(|e| e.ok())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.path().join("src"),
            )
        })
        .filter(|(_, src)| src.is_dir())
        .collect();
    out.push(("distlock-tests".into(), root.join("tests/src")));
    out.sort();
    out
}

fn root_entries() -> Vec<String> {
    std::fs::read_dir(workspace())
        .expect("the workspace is readable")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn no_module_cycles() {
    let mut failures = Vec::new();
    for (name, src) in crates() {
        let krate = Crate::scan(&name, &src).expect("sources are readable");
        let cycles = krate.cycles();
        for cycle in &cycles {
            println!("{}: {cycle}", krate.name);
        }
        if !cycles.is_empty() {
            failures.push(format!(
                "{name}: {} module cycle(s), printed above",
                cycles.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn no_source_file_over_400_lines() {
    let mut long = Vec::new();
    for (_, src) in crates()
        .into_iter()
        .filter(|(name, _)| name != "distlock-tests")
    {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let lines = std::fs::read_to_string(&file)
                .expect("sources are readable")
                .lines()
                .count();
            if lines > MAX_LINES {
                let rel = file
                    .strip_prefix(workspace())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                long.push(format!("{rel}: {lines} lines"));
            }
        }
    }
    long.sort();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines, split by idea:\n{}",
        long.join("\n")
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("sources are readable")
        .filter_map(|e| e.ok())
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn architecture_md() -> String {
    std::fs::read_to_string(workspace().join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md is readable")
}

#[test]
fn architecture_md_names_only_paths_that_exist() {
    let paths = doc::index(&workspace()).expect("the workspace is readable");
    let missing = doc::missing_paths(&architecture_md(), &paths, &root_entries());
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn adapters_have_the_contract_files() {
    let md = architecture_md();
    let (contract, adapters) = doc::contract_tables(&md, "## The adapter contract");
    let files: Vec<String> = contract
        .iter()
        .map(|row| row[0].trim_matches('`').to_string())
        .collect();
    assert!(
        files.len() >= 7,
        "the contract table lists its files: {files:?}"
    );
    let rows: Vec<&str> = adapters.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(
        rows,
        doc::ADAPTERS
            .iter()
            .map(|(row, _)| *row)
            .collect::<Vec<_>>(),
        "one row per adapter"
    );
    let roots = root_entries();
    let mut missing = Vec::new();
    for ((name, krate), row) in doc::ADAPTERS.iter().zip(&adapters) {
        let src = workspace().join("crates").join(krate).join("src");
        let own = row.get(1).cloned().unwrap_or_default();
        for file in &files {
            // An adapter may go without a contract file if its row says so.
            if !src.join(file).is_file() && !own.contains(&format!("no `{file}`")) {
                missing.push(format!("{krate}: src/{file} (contract)"));
            }
        }
        let paths = doc::index(&src).expect("sources are readable");
        for (_, span) in doc::backticked(&own) {
            if doc::is_path(&span, &roots) && !doc::exists(&span, &paths) {
                missing.push(format!("{krate}: `{span}` ({name}'s own files)"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that are not there:\n{}",
        missing.join("\n")
    );
}

/// The checker itself, on tiny crates written to a temp dir.
mod checker {
    use super::doc;
    use super::graph::Crate;

    fn fake_crate(files: &[(&str, &str)]) -> Crate {
        let dir = tempfile::tempdir().expect("a temp dir");
        for (path, text) in files {
            let path = dir.path().join("src").join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("a dir");
            std::fs::write(path, text).expect("a file");
        }
        Crate::scan("fake", &dir.path().join("src")).expect("a readable crate")
    }

    #[test]
    fn finds_a_cycle_through_grouped_and_in_body_paths() {
        let krate = fake_crate(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "pub use crate::b::X;\n"),
            (
                "b.rs",
                "use crate::{c::{self, Y as Z}, Other};\npub struct X;\n",
            ),
            ("c.rs", "pub struct Y;\nfn f() { super::a::X; }\n"),
        ]);
        let cycles: Vec<String> = krate.cycles().iter().map(|c| c.to_string()).collect();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(cycles[0].starts_with("a -> b -> c -> a\n"), "{}", cycles[0]);
        assert!(cycles[0].contains("c -> a: c.rs:2 `a::X`"), "{}", cycles[0]);
    }

    #[test]
    fn finds_a_cycle_among_the_children_of_a_directory() {
        let krate = fake_crate(&[
            ("lib.rs", "mod p;\n"),
            ("p/mod.rs", "mod x;\nmod y;\n"),
            ("p/x.rs", "use super::y::Y;\npub struct X;\n"),
            (
                "p/y.rs",
                "pub struct Y;\nimpl Y { fn x() -> crate::p::x::X { crate::p::x::X } }\n",
            ),
        ]);
        let cycles: Vec<String> = krate.cycles().iter().map(|c| c.to_string()).collect();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(
            cycles[0].starts_with("p::x -> p::y -> p::x\n"),
            "{}",
            cycles[0]
        );
    }

    #[test]
    fn comments_strings_tests_and_visibility_are_no_imports() {
        let krate = fake_crate(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\npub(crate) struct A;\n"),
            (
                "b.rs",
                concat!(
                    "//! Unlike [`crate::a::A`], …\n",
                    "/* crate::a::A /* nested */ crate::a::A */\n",
                    "pub struct B<'a>(&'a str);\n",
                    "const S: &str = \"crate::a::A\";\n",
                    "const R: &str = r#\"crate::a::A\"#;\n",
                    "const C: char = '\\'';\n",
                    "pub(super) fn f() {}\n",
                    "#[cfg(test)]\nmod tests { use super::*; }\n",
                ),
            ),
        ]);
        let cycles: Vec<String> = krate.cycles().iter().map(|c| c.to_string()).collect();
        assert!(cycles.is_empty(), "{cycles:?}");
    }

    #[test]
    fn a_missing_path_is_reported() {
        let paths = vec![
            "crates".to_string(),
            "crates/core".into(),
            "crates/core/src".into(),
            "crates/core/src/lease.rs".into(),
        ];
        let roots = vec!["crates".to_string()];
        let md = "`crates/core/src/lease.rs`, `lease.rs`, `crates/<name>`, `crates/core/src/renewal.rs`, `gone/`, `a::b`\n";
        assert_eq!(
            doc::missing_paths(md, &paths, &roots),
            [
                "ARCHITECTURE.md line 1: `crates/core/src/renewal.rs`",
                "ARCHITECTURE.md line 1: `gone/`"
            ]
        );
    }
}

/// A build needs nothing but Rust: no package in the lock file runs protoc
/// (or any other system tool) from its build script, so an application with
/// any of distlock's features builds on a machine with only rustup's toolchain.
#[test]
fn no_dependency_needs_protoc() {
    const NEEDS_PROTOC: &[&str] = &["prost-build", "tonic-build", "tonic-prost-build"];
    let lock = std::fs::read_to_string(workspace().join("Cargo.lock")).expect("Cargo.lock");
    let found: Vec<&str> = NEEDS_PROTOC
        .iter()
        .copied()
        .filter(|name| lock.contains(&format!("name = \"{name}\"")))
        .collect();
    assert!(
        found.is_empty(),
        "Cargo.lock has {found:?}, whose build scripts need protoc: a fresh machine with only \
         Rust could not build distlock (generate nothing at build time; write the messages by hand)"
    );
}

/// The fuzz crate compiles the CLI's modules through `#[path]` (the CLI is a
/// binary crate): every module of the CLI's `src/` is declared there, and
/// every file of `src/bench/` has its link in `fuzz/cli-bench/`, or the fuzz
/// build, which only CI's fuzz phase runs, breaks on the next new module.
#[test]
fn the_fuzz_crate_compiles_every_cli_module() {
    let root = workspace();
    let lib = std::fs::read_to_string(root.join("fuzz/src/lib.rs")).expect("fuzz/src/lib.rs");
    let names = |dir: &Path| -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .expect("a readable directory")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".rs") && name != "main.rs")
            .collect();
        out.sort();
        out
    };
    let cli = root.join("crates/distlock-cli/src");
    let undeclared: Vec<String> = names(&cli)
        .into_iter()
        .filter(|file| {
            let direct = format!("distlock-cli/src/{file}\"]");
            let linked = format!("cli-bench/{file}\"]");
            !lib.contains(&direct) && !lib.contains(&linked)
        })
        .collect();
    assert!(
        undeclared.is_empty(),
        "fuzz/src/lib.rs does not compile the CLI's {undeclared:?}: add a `#[path]` module for each"
    );
    let linked = names(&root.join("fuzz/cli-bench"));
    let unlinked: Vec<String> = names(&cli.join("bench"))
        .into_iter()
        .filter(|file| !linked.contains(file))
        .collect();
    assert!(
        unlinked.is_empty(),
        "fuzz/cli-bench/ lacks links to the CLI's src/bench/{unlinked:?}: `ln -s \
         ../../crates/distlock-cli/src/bench/<file> fuzz/cli-bench/`"
    );
}
