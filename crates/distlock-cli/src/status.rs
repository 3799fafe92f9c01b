//! `distlock status` and `distlock unlock --force`: an operator's look at one
//! key, and an operator's force-unlock, both through the adapter's own
//! `Inspect` implementation (the same code the conformance suite's fault hooks
//! use), so what they report is what the lock itself sees.

use crate::args::{KeyParser, UrlArg, no_inspect, show};
use crate::exit::{self, Failure};
use distlock::toolkit::{Holder, Inspect};
use distlock::{DynLock, LockKey};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Lock name to look at.
    #[arg(long, value_parser = KeyParser)]
    key: LockKey,
}

#[derive(Debug, clap::Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Lock name whose holder to delete.
    #[arg(long, value_parser = KeyParser)]
    key: LockKey,
    /// Delete the holder although it may still be working (see the command's help).
    #[arg(long)]
    force: bool,
}

/// Why a force-unlock needs `--force`, said wherever one is refused or done.
const DANGER: &str = "the holder is not told: it keeps running until its lease \
     notices the loss (a push signal, or its next renewal), so for that time it and the next \
     holder both believe they hold the lock; only fencing tokens checked by the protected \
     resource keep the old holder's writes out";

pub async fn status(args: StatusArgs) -> Result<u8, Failure> {
    let url = args.url.require()?.to_owned();
    let lock = distlock::connect(&url).await?;
    let inspect = inspect(&lock)?;
    match inspect.holder(&args.key).await? {
        Some(holder) => {
            println!("`{}` is held", args.key);
            print_holder(&holder);
        }
        None => println!("`{}` is free", args.key),
    }
    println!("{}", state_line(inspect).await);
    in_process_note(&lock);
    Ok(exit::OK)
}

pub async fn unlock(args: UnlockArgs) -> Result<u8, Failure> {
    // Refused before connecting: the flag is the operator's acknowledgement.
    if !args.force {
        return Err(Failure::usage(format!(
            "refusing to delete the holder of `{}` without --force: {DANGER}. Look first with \
             `distlock status`; pass --force if the holder is known dead or its writes are fenced",
            args.key
        )));
    }
    let url = args.url.require()?.to_owned();
    let lock = distlock::connect(&url).await?;
    let inspect = inspect(&lock)?;
    // Read first only to say whom the deletion hit; the deletion itself finds
    // the holder again, so a holder that changed meanwhile is still the one deleted.
    let before = inspect.holder(&args.key).await?;
    if inspect.delete_holder(&args.key).await? {
        println!("deleted the holder of `{}`", args.key);
        if let Some(holder) = &before {
            print_holder(holder);
        }
        eprintln!("distlock: warning: {DANGER}");
    } else {
        println!("`{}` was not held; nothing deleted", args.key);
    }
    in_process_note(&lock);
    Ok(exit::OK)
}

fn inspect(lock: &DynLock) -> Result<&dyn Inspect, Failure> {
    lock.inspect()
        .ok_or_else(|| Failure::new(exit::FAILURE, no_inspect(lock)))
}

/// One `name: value` line per field, for eyes and for `grep`/`awk` alike.
fn print_holder(holder: &Holder) {
    println!("owner: {}", holder.owner);
    match &holder.meta {
        Some(meta) => {
            println!("host: {}", meta.host());
            println!("pid: {}", meta.pid());
            println!("label: {}", meta.label().unwrap_or("none"));
        }
        None => println!(
            "host: unknown (the holder recorded none: another client, or an older release)"
        ),
    }
    match holder.token {
        Some(token) => println!("token: {token}"),
        None => println!("token: unknown (this backend does not store it beside the lock)"),
    }
    match holder.expires_in {
        Some(left) => println!("ttl left: {}", show(left)),
        // ZooKeeper: the node lives as long as its holder's session, whose
        // timeout is not on the node; MySQL for_update: the holder's connection.
        None => println!(
            "ttl left: unknown (the lock lives as long as the holder's session or connection)"
        ),
    }
}

/// The namespace's per-name state, as one line, so an operator sees it grow:
/// every name used within `state_ttl` keeps a few records until collected.
pub async fn state_line(inspect: &dyn Inspect) -> String {
    match inspect.state_records("").await {
        Ok(Some(count)) => format!(
            "state records: {count} in the namespace (names used within state_ttl, and any an \
             earlier release left)"
        ),
        Ok(None) => "state records: not counted by this backend".to_owned(),
        Err(e) => format!("state records: not counted: {e}"),
    }
}

/// A `memory://` store lives in one process: another process, such as this
/// one, never sees its locks.
fn in_process_note(lock: &DynLock) {
    if lock.name() == "memory" {
        eprintln!(
            "distlock: note: memory:// locks live inside one process; this command sees only its own"
        );
    }
}
