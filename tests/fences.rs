//! The fence suite: every fence case against every enabled store
//! (`<store>::<case>`), and the paused-holder cross product
//! (`<store>::paused_holder_under_<lock>`). Run one store with `cargo test -p
//! distlock-tests --all-features --test fences -- redis::`.

use distlock_tests::fences::servers::Servers;
use distlock_tests::fences::{self, paused};
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    // Most cases wait on ttls and servers rather than the CPU.
    args.test_threads.get_or_insert(8);
    let servers = Arc::new(Servers::default());
    let holder = env!("CARGO_BIN_EXE_fenced-holder");
    let paused = fences::remote_stores()
        .into_iter()
        .flat_map(|(store, at)| paused::trials(store, at, &servers, holder));
    let trials = fences::specs(&servers)
        .into_iter()
        .flat_map(distlock_testkit::fences::trials)
        .chain(paused)
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
