//! Child processes that never outlive the test: a [`ManagedChild`] is killed and
//! reaped when dropped. Statics are never dropped, and a test binary may itself be
//! killed, so every child also gets a watchdog: a tiny `sh` that blocks reading a
//! pipe from the test process and, when the pipe closes (the kernel closes it when
//! the test process exits or dies), SIGKILLs the child and removes its temp dir,
//! which no `TempDir` drop will remove then.

use super::ServerError;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Sends `signal` to `pid`. The one place the testkit signals processes.
pub(crate) fn send_signal(pid: u32, signal: Signal) -> Result<(), ServerError> {
    let error = |source| ServerError::Signal {
        pid,
        signal: signal.as_str().to_owned(),
        source,
    };
    let raw = i32::try_from(pid).map_err(|_| error(nix::Error::EINVAL))?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal).map_err(error)
}

/// A spawned child plus its watchdog; kills and reaps both when dropped.
#[derive(Debug)]
pub(crate) struct ManagedChild {
    name: String,
    child: Child,
    exited: Option<ExitStatus>,
    scratch_dir: PathBuf,
    watchdog: Option<Child>,
}

impl ManagedChild {
    /// Spawns `command`, naming it `name` in errors. If the test process exits or
    /// dies first, the watchdog kills the child and removes `scratch_dir`.
    pub(crate) fn spawn(
        name: &str,
        command: &mut Command,
        scratch_dir: &Path,
    ) -> Result<Self, ServerError> {
        let child = command
            .spawn()
            .map_err(ServerError::io(format!("spawn {name}")))?;
        let watchdog = spawn_watchdog(Some(child.id()), scratch_dir);
        Ok(ManagedChild {
            name: name.to_owned(),
            child,
            exited: None,
            scratch_dir: scratch_dir.to_owned(),
            watchdog,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The exit status, reaping the child if it has exited.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
            if self.exited.is_some() {
                self.rearm_for_dir_only();
            }
        }
        self.exited
    }

    /// Sends `signal` unless the child has exited (its pid may belong to another
    /// process by then).
    pub(crate) fn signal(&mut self, signal: Signal) -> Result<(), ServerError> {
        send_signal(self.running_pid()?, signal)
    }

    /// SIGSTOPs the child and every process it started, and returns once all
    /// their threads have stopped.
    pub(crate) fn pause(&mut self) -> Result<(), ServerError> {
        stop_tree(self.running_pid()?)
    }

    /// SIGCONTs the child and every process it started.
    pub(crate) fn resume(&mut self) -> Result<(), ServerError> {
        continue_tree(self.running_pid()?)
    }

    /// The child's pid while it has not exited (after that, it may belong to
    /// another process).
    fn running_pid(&mut self) -> Result<u32, ServerError> {
        match self.exit_status() {
            Some(_) => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
            None => Ok(self.pid()),
        }
    }

    /// SIGKILLs the child and reaps it.
    pub(crate) fn kill(&mut self) {
        if self.exited.is_none() {
            self.kill_and_reap();
            self.rearm_for_dir_only();
        }
    }

    fn kill_and_reap(&mut self) {
        // Errors mean it is already gone; `wait` reaps it either way.
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
    }

    /// Once the child is reaped its pid may be reused, so the watchdog must not kill
    /// it any more; it still removes the scratch dir, which a server killed for
    /// good (and held in a static) would otherwise leak.
    fn rearm_for_dir_only(&mut self) {
        self.disarm_watchdog();
        self.watchdog = spawn_watchdog(None, &self.scratch_dir);
    }

    fn disarm_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        // The owner's TempDir removes the scratch dir from here on.
        self.disarm_watchdog();
        if self.exited.is_none() {
            self.kill_and_reap();
        }
    }
}

/// SIGSTOPs `pid` and its descendants, and waits until every thread of them has
/// stopped: a paused server answers nothing, not even on a connection served by
/// a child (a PostgreSQL backend) or a thread. A process forks until its stop
/// lands, so the tree is walked again until a walk finds no new process.
///
/// Containers are paused this way too, from the host, rather than with `docker
/// pause`: under load the cgroup v1 freezer gives up ("unable to freeze") and
/// thaws the container again, which failed a chaos run.
pub(crate) fn stop_tree(pid: u32) -> Result<(), ServerError> {
    let mut stopped: Vec<u32> = Vec::new();
    loop {
        let fresh: Vec<u32> = tree(pid)
            .into_iter()
            .filter(|pid| !stopped.contains(pid))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        for &pid in &fresh {
            signal_if_there(pid, Signal::SIGSTOP)?;
        }
        for &pid in &fresh {
            wait_stopped(pid)?;
        }
        stopped.extend(fresh);
    }
}

/// SIGCONTs `pid` and its descendants.
pub(crate) fn continue_tree(pid: u32) -> Result<(), ServerError> {
    tree(pid)
        .into_iter()
        .try_for_each(|pid| signal_if_there(pid, Signal::SIGCONT))
}

/// Sends `signal` to `pid`; one that has exited since it was listed is skipped.
fn signal_if_there(pid: u32, signal: Signal) -> Result<(), ServerError> {
    match send_signal(pid, signal) {
        Err(ServerError::Signal {
            source: nix::Error::ESRCH,
            ..
        }) => Ok(()),
        other => other,
    }
}

/// `pid` and its descendants, parents before children, from
/// `/proc/<pid>/task/<tid>/children` (each thread's own children).
fn tree(pid: u32) -> Vec<u32> {
    let mut found = vec![pid];
    let mut next = 0;
    while let Some(&parent) = found.get(next) {
        next += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                if !found.contains(&child) {
                    found.push(child);
                }
            }
        }
    }
    found
}

/// Waits until every thread of `pid` is stopped (or gone).
///
/// A group stop reaches each thread only when that thread next runs, which on a
/// loaded machine took over 300 ms for a JVM: without this wait a "paused" server
/// still answered requests sent right after `pause` returned.
fn wait_stopped(pid: u32) -> Result<(), ServerError> {
    const LIMIT: Duration = Duration::from_secs(5);
    let deadline = std::time::Instant::now() + LIMIT;
    while !all_threads_stopped(pid) {
        if std::time::Instant::now() >= deadline {
            return Err(ServerError::Protocol(format!(
                "pid {pid} got SIGSTOP but did not stop within {LIMIT:?}"
            )));
        }
        // Blocking is fine: only the kernel's scheduling is awaited, nothing of ours.
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        // Gone, or no procfs to ask: nothing left that could answer.
        return true;
    };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name, which may hold spaces.
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].trim_start().chars().next());
        matches!(state, None | Some('T' | 't' | 'Z' | 'X'))
    })
}

/// The watchdog: on EOF, kill the child if there is one, give it up to 5 s to
/// disappear (a zombie nobody reaps never does), then remove the scratch dir.
const WATCHDOG_SCRIPT: &str = r#"read _ignored
if [ -n "$1" ]; then
  kill -KILL "$1" 2>/dev/null
  i=0
  while kill -0 "$1" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
rm -rf -- "$2""#;

/// Spawns `sh` that SIGKILLs `pid` (if any) and removes `scratch_dir` once the
/// test process exits or dies. Best effort: without it, a test process that exits
/// without dropping the server leaks it.
fn spawn_watchdog(pid: Option<u32>, scratch_dir: &Path) -> Option<Child> {
    let spawned = Command::new("sh")
        .args(["-c", WATCHDOG_SCRIPT, "distlock-watchdog"])
        .arg(pid.map(|pid| pid.to_string()).unwrap_or_default())
        .arg(scratch_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(watchdog) => Some(watchdog),
        Err(error) => {
            tracing::warn!(%error, pid, "no watchdog: the child may outlive a killed test");
            None
        }
    }
}
