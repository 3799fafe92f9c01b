//! `distlock run` (hold a lock or a semaphore permit while a command runs) and
//! `distlock elect` (run a command while leader).
//!
//! The command gets its own process group so that, when the lease is lost, the
//! whole tree it started can be stopped: a lost lock means someone else may be
//! doing the same work right now, and a grandchild left running would be exactly
//! the paused holder fencing warns about.

use crate::args::{KeyParser, UrlArg, parse_duration, parse_positive_duration, show};
use crate::exit::{self, Failure};
use crate::held::{Hold, Want, parse_permits};
use crate::observe;
use distlock::{
    AcquireOptions, DynLock, Held, LockError, LockKey, Renewal, RwMode, SingleLease, Wait,
};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    url: UrlArg,
    #[command(flatten)]
    hold: HoldArgs,
    /// Hold one of N permits of a semaphore named KEY instead of the lock: up
    /// to N commands run at once, each with its slot (0..N) in DISTLOCK_SLOT.
    #[arg(long, value_name = "N", value_parser = parse_permits, conflicts_with_all = ["read", "write"])]
    permits: Option<u32>,
    /// Take a read share of the key's read-write lock instead of the lock:
    /// other `--read` runs hold it at the same time, `--write` runs wait.
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// Take the key's read-write lock for writing: alone, after the readers
    /// and writers queued before it (see docs/rwlock.md).
    #[arg(long)]
    write: bool,
}

#[derive(Debug, clap::Args)]
pub struct ElectArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Watch the election KEY without campaigning: print its leader now and
    /// at each change, one line each (`leader term=T holder=H` or `vacant`),
    /// until Ctrl-C.
    #[arg(long, value_name = "KEY", value_parser = KeyParser, conflicts_with_all = ["proposal", "key", "command"])]
    observe: Option<LockKey>,
    #[command(flatten)]
    hold: Option<HoldArgs>,
    /// This candidate's identity, shown to observers of the election
    /// (default: host name and process id).
    #[arg(long)]
    proposal: Option<String>,
}

/// What `run` and `elect` share.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    /// Lock name (1 to 512 bytes, no control characters).
    #[arg(long, value_parser = KeyParser)]
    key: LockKey,
    /// Lease ttl: how long the lock outlives distlock if it dies; renewed every
    /// ttl/3 (default: the URL's `ttl`, else 30s).
    #[arg(long, value_parser = parse_positive_duration)]
    ttl: Option<Duration>,
    /// Wait at most this long for the lock (default: the URL's `wait`, else until acquired).
    #[arg(long, value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Give up at once if the lock is held elsewhere (exit 75).
    #[arg(long)]
    no_wait: bool,
    /// After SIGTERM on lock loss, wait this long before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_after: Duration,
    /// Hold the lock at most this long: then the command is stopped as on loss (exit 69).
    #[arg(long, value_parser = parse_positive_duration)]
    max_hold: Option<Duration>,
    /// Keep the lock at least this long from its grant, however soon the
    /// command exits (or distlock dies): with --no-wait, the job runs at most
    /// once per period across a fleet (default: the URL's `min_hold`).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    at_least: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

/// The signals forwarded to the command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let listen = |kind| {
            signal(kind)
                .map_err(|e| Failure::new(exit::FAILURE, format!("cannot listen for signals: {e}")))
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

pub async fn run(args: RunArgs) -> Result<u8, Failure> {
    let want = match (args.permits, args.read, args.write) {
        (Some(limit), _, _) => Want::Permit { limit },
        (None, true, _) => Want::Share(RwMode::Read),
        (None, false, true) => Want::Share(RwMode::Write),
        (None, false, false) => Want::Lock,
    };
    hold(&args.url, args.hold, want).await
}

pub async fn elect(args: ElectArgs) -> Result<u8, Failure> {
    // clap refuses --observe beside --key or a command, and neither.
    let hold_args = match (args.observe, args.hold) {
        (Some(key), _) => return observe::observe(&args.url, &key).await,
        (None, Some(hold_args)) => hold_args,
        (None, None) => {
            return Err(Failure::usage(
                "give --key KEY -- CMD to campaign, or --observe KEY to watch the leader",
            ));
        }
    };
    let proposal = args.proposal.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown-host".into());
        format!("{host}:{}", std::process::id())
    });
    hold(&args.url, hold_args, Want::Leadership { proposal }).await
}

async fn hold(url: &UrlArg, args: HoldArgs, want: Want) -> Result<u8, Failure> {
    let url = url.require()?.to_owned();
    // Listen before connecting: a Ctrl-C while waiting must cancel the wait
    // cleanly (acquire is cancel-safe), not kill us with a queue entry behind.
    let mut signals = Signals::install()?;
    let lock: DynLock = tokio::select! {
        lock = distlock::connect(&url) => lock?,
        sig = signals.next() => return Ok(128 + sig as u8),
    };
    let opts = options(&args, lock.default_options());
    let baseline = alive_tasks();
    let outcome = hold_and_run(&lock, &args, &want, &opts, &mut signals).await;
    drop(lock);
    settle(baseline).await;
    outcome
}

/// The URL's acquire defaults with the flags given on top. The command runs for
/// as long as it likes, so the lease always renews itself (a URL's
/// `renewal=manual` becomes automatic; an interval is kept).
fn options(args: &HoldArgs, defaults: AcquireOptions) -> AcquireOptions {
    let mut opts = defaults;
    if let Some(ttl) = args.ttl {
        opts = opts.ttl(ttl);
    }
    match (args.no_wait, args.wait) {
        (true, _) => opts = opts.wait(Wait::No),
        (false, Some(wait)) => opts = opts.wait(Wait::For(wait)),
        (false, None) => {}
    }
    if opts.get_renewal() == Renewal::Manual {
        opts = opts.renewal(Renewal::Auto);
    }
    if let Some(max_hold) = args.max_hold {
        opts = opts.max_hold(max_hold);
    }
    if let Some(at_least) = args.at_least {
        opts = opts.min_hold(at_least);
    }
    opts
}

async fn hold_and_run(
    lock: &DynLock,
    args: &HoldArgs,
    want: &Want,
    opts: &AcquireOptions,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    opts.validate(&lock.capabilities())?;
    let lease = tokio::select! {
        lease = want.acquire(lock, &args.key, opts) => lease?,
        sig = signals.next() => {
            eprintln!("distlock: {sig} while waiting for `{}`; not acquired", args.key);
            return Ok(128 + sig as u8);
        }
    };
    let child = match spawn(&args.command, &lease) {
        Ok(child) => child,
        Err(failure) => {
            release(lease).await;
            return Err(failure);
        }
    };
    supervise(child, lease, signals, args.kill_after).await
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Adapters clean up a cancelled or timed-out wait (a queue key, an ephemeral
/// node) in a spawned task. A process that exits at once kills that task, and
/// the leftover entry would make the next `distlock run` wait for its ttl. So
/// wait, briefly, until the tasks started during the lock work have finished.
async fn settle(baseline: usize) {
    let deadline = Instant::now() + SETTLE_LIMIT;
    while alive_tasks() > baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The longest `settle` waits: about one round trip on a slow network.
const SETTLE_LIMIT: Duration = Duration::from_secs(1);

fn spawn(command: &[OsString], lease: &Hold) -> Result<Child, Failure> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given: put it after `--`"))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    // The URL may carry a password: none of our configuration reaches the child.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(name);
        }
    }
    lease.describe_to(&mut cmd);
    cmd.process_group(0);
    cmd.spawn().map_err(|e| {
        let shown = program.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => Failure::new(
                exit::NOT_FOUND,
                format!("cannot run `{shown}`: command not found"),
            ),
            _ => Failure::new(exit::CANNOT_EXECUTE, format!("cannot run `{shown}`: {e}")),
        }
    })
}

async fn supervise(
    mut child: Child,
    lease: Hold,
    signals: &mut Signals,
    kill_after: Duration,
) -> Result<u8, Failure> {
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let lost = lease.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = status_code(status.map_err(|e| {
                    Failure::new(exit::FAILURE, format!("cannot wait for the command: {e}"))
                })?);
                return finish(lease, code).await;
            }
            reason = &mut lost => {
                eprintln!(
                    "distlock: lock `{}` lost ({reason}); stopping the command (SIGTERM, SIGKILL after {})",
                    lease.key(),
                    show(kill_after),
                );
                if let Some(group) = group {
                    terminate(&mut child, group, kill_after).await;
                }
                release(lease).await;
                return Ok(exit::LOST);
            }
            sig = signals.next() => {
                if let Some(group) = group {
                    send(group, sig);
                }
            }
        }
    }
}

/// Releases after the command ended. A lease found lost at release means the
/// command may have run part of the time without the lock: report it as lost.
async fn finish(lease: Hold, code: u8) -> Result<u8, Failure> {
    let key = lease.key().clone();
    match tokio::time::timeout(Duration::from_secs(10), lease.release()).await {
        Ok(Ok(())) => Ok(code),
        Ok(Err(LockError::Lost { reason, .. })) => {
            eprintln!(
                "distlock: lock `{key}` was lost while the command ran ({reason}); \
                 the command exited with {code}"
            );
            Ok(exit::LOST)
        }
        Ok(Err(e)) => {
            eprintln!("distlock: warning: release failed, the ttl will free the lock: {e}");
            Ok(code)
        }
        Err(_) => {
            eprintln!("distlock: warning: release timed out, the ttl will free the lock");
            Ok(code)
        }
    }
}

/// Best-effort release on the way out; the ttl frees the lock otherwise.
async fn release(lease: Hold) {
    let outcome = tokio::time::timeout(Duration::from_secs(10), lease.release()).await;
    if let Ok(Err(e)) = outcome
        && !matches!(e, LockError::Lost { .. })
    {
        eprintln!("distlock: warning: release failed, the ttl will free the lock: {e}");
    }
}

/// SIGTERM to the whole group; SIGKILL to whatever is left after `grace`.
async fn terminate(child: &mut Child, group: Pid, grace: Duration) {
    send(group, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    // Reaping the leader first matters: a zombie still counts as a group member.
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_alive(group) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if group_alive(group) {
        send(group, Signal::SIGKILL);
    }
    let _ = child.wait().await;
}

fn send(group: Pid, sig: Signal) {
    // ESRCH: the group is gone already, which is what we wanted.
    let _ = killpg(group, sig);
}

fn group_alive(group: Pid) -> bool {
    killpg(group, None).is_ok()
}

/// The exit code a shell would report for `status`: the code, or 128+signal.
fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::FAILURE),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}
