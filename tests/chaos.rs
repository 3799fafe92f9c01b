//! The history checker under faults, one trial per backend
//! (`<backend>::chaos`) plus `redis::restart_window`: K clients, random
//! server, proxy and holder faults for `DISTLOCK_CHAOS_SECS` (10 s by default)
//! each, a history file per trial, and a table at the end. `-- --check FILE`
//! re-checks a history file instead. See `docs/chaos.md`.

use distlock_testkit::chaos::report::{Row, table, verdict};
use distlock_testkit::chaos::{History, check};
use distlock_testkit::runner::{runtime, skip_list};
use distlock_tests::chaos;
use libtest_mimic::Trial;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    if let Some(at) = raw.iter().position(|a| a == "--check") {
        return check_file(raw.get(at + 1));
    }
    let duration = match chaos::duration() {
        Ok(duration) => duration,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let mut args = libtest_mimic::Arguments::from_args();
    // Every trial at once: each waits on faults and servers far more than on the CPU.
    args.test_threads.get_or_insert(16);
    let rows: Arc<Mutex<Vec<Row>>> = Arc::default();
    let skipped = skip_list();
    let holder = env!("CARGO_BIN_EXE_chaos-holder");
    let dir = chaos::history_dir(env!("CARGO_TARGET_TMPDIR"));
    let trials: Vec<Trial> = chaos::specs()
        .into_iter()
        .map(|spec| {
            let (rows, dir) = (rows.clone(), dir.clone());
            let ignored = skipped.iter().any(|s| s == spec.backend);
            Trial::test(spec.trial, move || {
                let (row, verdict) =
                    runtime().block_on(chaos::run_spec(&spec, holder, duration, &dir));
                rows.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(row);
                Ok(verdict?)
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    #[cfg(feature = "redis")]
    let trials = {
        let mut trials = trials;
        trials.push(restart_window_trial(
            rows.clone(),
            duration,
            dir.clone(),
            skipped.iter().any(|s| s == "redis"),
        ));
        trials
    };
    let conclusion = libtest_mimic::run(&args, trials);
    let rows = rows.lock().unwrap_or_else(PoisonError::into_inner);
    if !rows.is_empty() {
        println!("\n{}", table(&rows));
    }
    conclusion.exit_code()
}

/// `redis::restart_window`: the overlap without a guard is printed; with the
/// guard there must be none.
#[cfg(feature = "redis")]
fn restart_window_trial(
    rows: Arc<Mutex<Vec<Row>>>,
    duration: std::time::Duration,
    dir: std::path::PathBuf,
    ignored: bool,
) -> Trial {
    Trial::test("redis::restart_window", move || {
        let (bare, guarded) = runtime()
            .block_on(chaos::restart::restart_window(duration, &dir))
            .map_err(|e| {
                rows.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Row::not_run(
                        "redis::restart_window",
                        distlock_testkit::chaos::Requirement::Measured,
                    ));
                libtest_mimic::Failed::from(format!("redis::restart_window: {e}"))
            })?;
        println!("{}\n{}", bare.text(), guarded.text());
        rows.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend([bare.row(), guarded.row()]);
        let failed: Vec<String> = [bare, guarded]
            .into_iter()
            .filter(|r| !r.passed())
            .map(|r| r.text())
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(libtest_mimic::Failed::from(failed.join("\n")))
        }
    })
    .with_ignored_flag(ignored)
}

/// Re-checks a history file: the verdict and the windows of its failures.
fn check_file(path: Option<&String>) -> ExitCode {
    let Some(path) = path else {
        eprintln!("usage: chaos --check FILE");
        return ExitCode::from(2);
    };
    let history = match History::read_file(std::path::Path::new(path)) {
        Ok(history) => history,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let findings = check(&history);
    print!("{}", verdict(&history, &findings));
    if findings.failures(&history).next().is_none() {
        println!(
            "{path}: {} events, no required property violated",
            history.events.len()
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
