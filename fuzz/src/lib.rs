//! Fuzz targets for distlock's parsers, as library functions: `fuzz_targets/`
//! wraps each in `fuzz_target!`, `regressions/` replays crashes through them.

pub mod cli;
pub mod secret;
pub mod targets;

// The CLI is a binary crate: its modules are compiled here the way its main.rs
// declares them, at the crate root, so that their `crate::args` and
// `crate::exit` paths resolve; `commands` is the CLI's own top-level parser.
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/args.rs"]
mod args;
// A `#[path]` file is read as a `mod.rs`: its `mod counter;` would be looked
// for beside it, in the CLI's src/, not in src/bench/. `cli-bench/` holds
// symlinks to bench.rs and to each file of src/bench/, side by side.
#[allow(dead_code, unused_imports)]
#[path = "../cli-bench/bench.rs"]
mod bench;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/check.rs"]
mod check;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/commands.rs"]
mod commands;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/demo.rs"]
mod demo;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/exit.rs"]
mod exit;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/fence.rs"]
mod fence;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/held.rs"]
mod held;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/observe.rs"]
mod observe;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/plot.rs"]
mod plot;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/progress.rs"]
mod progress;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/run.rs"]
mod run;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/stats.rs"]
mod stats;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/status.rs"]
mod status;
#[allow(dead_code, unused_imports)]
#[path = "../../crates/distlock-cli/src/usage.rs"]
mod usage;
