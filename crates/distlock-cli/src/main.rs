//! `distlock`: run a command under a distributed lock, check a deployment, benchmark
//! it, and watch fencing stop a paused holder.

mod args;
mod bench;
mod check;
mod demo;
mod exit;
mod plot;
mod progress;
mod run;
mod stats;

use clap::{Parser, Subcommand};
use exit::Failure;
use std::process::ExitCode;

/// Distributed locks with fencing tokens, from the command line.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hold a lock while a command runs, renewing it; stop the command if the lock is lost.
    ///
    /// Exit status: the command's own (128+N if signal N killed it); 75 if the lock
    /// was not acquired; 69 if it was lost while the command ran (the command gets
    /// SIGTERM, then SIGKILL after --kill-after); 2 for bad usage, key, ttl, URL or
    /// configuration; 1 if the backend cannot be reached; 127/126 if the command
    /// cannot be found/executed.
    ///
    /// The command runs in its own process group with DISTLOCK_KEY and
    /// DISTLOCK_FENCING_TOKEN set; every other DISTLOCK_* variable (the URL
    /// included) is removed from its environment. SIGINT, SIGTERM and SIGHUP sent
    /// to distlock are forwarded to the command's process group; the lock is
    /// released when the command ends.
    Run(run::RunArgs),
    /// Run a short live conformance check against your own deployment.
    ///
    /// Covers acquire/release, exclusion between two clients, rising fencing
    /// tokens, expiry with a short ttl and the lost signal; prints one line per
    /// check, then warnings about known deployment pitfalls. Exits 1 if a check
    /// fails. Keys are created under `distlock-check/` and cleaned up.
    Check(check::CheckArgs),
    /// Measure lock latency and throughput next to the backend's raw round trip.
    Bench(bench::BenchArgs),
    /// The flash-sale story: oversold without a lock, exact with one, and a paused
    /// holder's late write refused by a fencing token.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version exit 0, usage errors 2.
        Err(e) => e.exit(),
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
            Command::Check(args) => check::check(args).await,
            Command::Bench(args) => bench::bench(args).await,
            Command::Demo(args) => demo::demo(args).await,
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
