//! Every conformance case against every enabled backend, one named test each:
//! `<backend>::<case>`. Run one backend with `cargo test -p distlock-tests
//! --all-features --test conformance -- redis::`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `drop_releases` panics a holder on purpose; keep its backtrace out of the log.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload().downcast_ref::<&str>().copied().unwrap_or("");
        if !message.starts_with("deliberate panic") {
            report(info);
        }
    }));
    // The `min_hold_outlasts_a_killed_holder` case kills this holder.
    distlock_testkit::holder::use_lock_holder(env!("CARGO_BIN_EXE_chaos-holder"));
    let mut args = libtest_mimic::Arguments::from_args();
    // Most cases wait on ttls rather than the CPU: run many at once.
    args.test_threads.get_or_insert(16);
    let trials = distlock_tests::specs()
        .into_iter()
        .flat_map(distlock_testkit::runner::trials)
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
