//! `distlock`: run a command under a distributed lock, check a deployment, benchmark
//! it, and watch fencing stop a paused holder.

mod args;
mod bench;
mod check;
mod commands;
mod demo;
mod exit;
mod fence;
mod held;
mod observe;
mod plot;
mod progress;
mod run;
mod stats;
mod status;
mod usage;

use clap::Parser;
use commands::{Cli, Command};
use exit::Failure;
use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // Help and version exit 0, usage errors 2; clap's message may quote a
        // URL that missed its --url, so it is printed redacted.
        Err(e) => return usage::report(&e, &args),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Elect(args) => run::elect(args).await,
            Command::Check(args) => check::check(args).await,
            Command::Bench(args) => bench::bench(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::Fence(args) => fence::fence(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Unlock(args) => status::unlock(args).await,
        }
    });
    // Release-on-drop and renewal tasks get no further say once we exit.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Failure { code, message }) => {
            eprintln!("distlock: {message}");
            ExitCode::from(code)
        }
    }
}
