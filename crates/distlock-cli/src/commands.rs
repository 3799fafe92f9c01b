//! The command line's shape: the subcommands and their help. Kept apart from
//! `main.rs` so the fuzz targets parse arguments with exactly this parser.

use crate::{bench, check, demo, fence, run, status};
use clap::{Parser, Subcommand};

/// Distributed locks with fencing tokens, from the command line.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    ///
    /// With `--permits N`, holds one of N permits of the semaphore KEY instead:
    /// up to N commands run at once, and each gets its slot (0..N, unique among
    /// live holders) in DISTLOCK_SLOT.
    ///
    /// With --read or --write the command holds a share of the key's read-write
    /// lock instead: --read runs share it, a --write run holds it alone.
    Run(run::RunArgs),
    /// Run a command while leader of the election KEY; stop it on loss.
    ///
    /// Campaigns (waiting per --wait), runs CMD once elected with
    /// DISTLOCK_KEY and DISTLOCK_FENCING_TOKEN (the term) set, stops it with
    /// SIGTERM then SIGKILL if leadership is lost, and resigns when it ends.
    /// Exit codes are those of `run`.
    ///
    /// With `--observe KEY` (and no --key or command) it campaigns for
    /// nothing: it prints the leader of KEY now and at each change, one line
    /// each, until Ctrl-C or SIGTERM (exit 0).
    Elect(run::ElectArgs),
    /// Run a short live conformance check against your own deployment.
    ///
    /// Covers acquire/release, exclusion between two clients, rising fencing
    /// tokens, expiry with a short ttl and the lost signal; prints one line per
    /// check, then warnings about known deployment pitfalls. Exits 1 if a check
    /// fails. Keys are created under `distlock-check/` and cleaned up.
    Check(check::CheckArgs),
    /// Measure lock latency and throughput next to the protocol's own write
    /// sequence sent raw, with the requests the server counted for each.
    Bench(bench::BenchArgs),
    /// One fenced write, refused by the store if a newer lock holder wrote first.
    ///
    /// Meant for a child of `distlock run`, whose token it reads from
    /// $DISTLOCK_FENCING_TOKEN. The store is the URL's, a backend that also
    /// stores data (--resource lists them; with --sql, a statement run in the
    /// transaction that admits the token).
    ///
    /// Exit status: 0 written (--add prints the new value); 77 stale token (a
    /// higher token was admitted: the writer lost its lock); 65 --add would drop
    /// below --floor, nothing written; 2 bad usage, resource, value or URL; 1 the
    /// store cannot be reached or failed.
    Fence(fence::FenceArgs),
    /// The flash-sale story: oversold without a lock, exact with one, and a paused
    /// holder's late write refused by a fencing token.
    Demo(demo::DemoArgs),
    /// Who holds a lock: held or free, the holder's owner id, fencing token and
    /// the ttl the server has left for it.
    ///
    /// Exit status: 0 whether the key is held or free; 1 if the backend cannot be
    /// reached; 2 for bad usage, key or URL.
    Status(status::StatusArgs),
    /// Force-unlock: delete a lock's holder on the server, as an operator. DANGEROUS.
    ///
    /// The holder is not told. It keeps running until its lease notices the loss
    /// (a push signal, or its next renewal), and meanwhile the next holder also
    /// runs: only fencing tokens checked by the protected resource keep the old
    /// holder's writes out. Use it for a holder known to be dead, or whose writes
    /// are fenced. Refused without --force.
    ///
    /// Exit status: 0 deleted, or nothing was held; 2 without --force, or bad
    /// usage, key or URL; 1 if the backend cannot be reached.
    Unlock(status::UnlockArgs),
}
