//! Child processes that never outlive the test: servers and lock holders.
//!
//! A [`ServerProcess`] is killed and reaped when dropped. Statics are never dropped,
//! and a test binary may itself be killed, so every child also gets a watchdog: a
//! tiny `sh` that blocks reading a pipe from the test process and, when the pipe
//! closes (the kernel closes it when the test process exits or dies), SIGKILLs the
//! child and removes its temp dir, which no `TempDir` drop will remove then.

use super::ServerError;
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How often readiness and exit are polled.
const POLL: Duration = Duration::from_millis(20);
/// Longest single readiness probe, so a hung probe cannot eat the whole timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

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
        match self.exit_status() {
            Some(_) => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
            None => send_signal(self.pid(), signal),
        }
    }

    /// SIGSTOPs the child and returns once every one of its threads has stopped.
    pub(crate) fn pause(&mut self) -> Result<(), ServerError> {
        self.signal(Signal::SIGSTOP)?;
        wait_stopped(self.pid())
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

/// A server child process: one command line, run with its own scratch dir and its
/// output appended to `server.log` there, restartable with the same command line.
///
/// All methods take `&self`, so a server shared by several tests (for example in a
/// static) can still be paused, killed and restarted.
pub struct ServerProcess {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    dir: PathBuf,
    log_path: PathBuf,
    child: Mutex<Option<ManagedChild>>,
}

impl std::fmt::Debug for ServerProcess {
    // Arguments are left out: they may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("pid", &self.pid())
            .field("log_path", &self.log_path)
            .finish()
    }
}

impl ServerProcess {
    /// Starts `program args`, with stdin closed and stdout and stderr appended to
    /// `dir/server.log`. `dir` is the server's own scratch dir (its `TempDir`): if the
    /// test process exits without dropping this value, as with a server in a static,
    /// the watchdog removes `dir`. `name` identifies the process in errors.
    pub fn start(
        name: &str,
        program: &Path,
        args: Vec<OsString>,
        dir: &Path,
    ) -> Result<Self, ServerError> {
        let process = ServerProcess {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            dir: dir.to_owned(),
            log_path: dir.join("server.log"),
            child: Mutex::new(None),
        };
        process.respawn()?;
        Ok(process)
    }

    /// Starts the same command line again. Fails if the process is still running.
    pub fn respawn(&self) -> Result<(), ServerError> {
        let mut slot = self.lock();
        if let Some(child) = slot.as_mut()
            && child.exit_status().is_none()
        {
            return Err(ServerError::Protocol(format!(
                "{} is already running",
                self.name
            )));
        }
        let log_context = format!("open log {}", self.log_path.display());
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(ServerError::io(log_context.clone()))?;
        let log_err = log.try_clone().map_err(ServerError::io(log_context))?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        *slot = Some(ManagedChild::spawn(&self.name, &mut command, &self.dir)?);
        Ok(())
    }

    /// Polls `probe` until it returns true. Fails early, with the log tail, if the
    /// process exits, and after `timeout` if it never answers.
    pub async fn wait_ready<F, Fut>(
        &self,
        timeout: Duration,
        mut probe: F,
    ) -> Result<(), ServerError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            let answered = tokio::time::timeout(PROBE_TIMEOUT, probe()).await;
            if matches!(answered, Ok(true)) {
                // The answer may come from a process that took our port while ours
                // was failing to bind it.
                return self.check_running();
            }
            if Instant::now() >= deadline {
                return Err(ServerError::NotReady {
                    name: self.name.clone(),
                    waited: timeout,
                    log_tail: self.log_tail(40),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Ok while the process runs; otherwise the reason, with its log tail.
    pub fn check_running(&self) -> Result<(), ServerError> {
        let status = self.lock().as_mut().and_then(ManagedChild::exit_status);
        match status {
            None if self.pid().is_some() => Ok(()),
            None => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
            Some(status) => Err(ServerError::Exited {
                name: self.name.clone(),
                status: status.to_string(),
                log_tail: self.log_tail(40),
            }),
        }
    }

    /// The process id while the process runs (paused counts as running).
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.lock();
        let child = slot.as_mut()?;
        child.exit_status().is_none().then(|| child.pid())
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Freezes the process with SIGSTOP: its sockets stay open and nothing answers.
    /// Returns once every thread of the process has stopped.
    pub fn pause(&self) -> Result<(), ServerError> {
        match self.lock().as_mut() {
            Some(child) => child.pause(),
            None => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
        }
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGCONT)
    }

    /// Sends `signal` to the running process.
    pub(crate) fn signal(&self, signal: Signal) -> Result<(), ServerError> {
        match self.lock().as_mut() {
            Some(child) => child.signal(signal),
            None => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
        }
    }

    /// Kills the process with SIGKILL, as a crash would, and reaps it. Does nothing
    /// if it is not running. On return the process no longer exists.
    pub fn kill(&self) {
        if let Some(child) = self.lock().as_mut() {
            child.kill();
        }
    }

    /// Asks the process to shut down (SIGTERM, resuming it if paused) and waits up to
    /// `grace` for it to exit, then kills it. On return the process no longer exists.
    pub async fn stop(&self, grace: Duration) {
        {
            let mut slot = self.lock();
            let Some(child) = slot.as_mut() else { return };
            if child.signal(Signal::SIGTERM).is_err() {
                return;
            }
            let _ = child.signal(Signal::SIGCONT);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        tracing::warn!(name = %self.name, ?grace, "no clean shutdown in time; killing");
        self.kill();
    }

    /// The last `lines` lines the process wrote to stdout and stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// The file receiving the process's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    fn lock(&self) -> MutexGuard<'_, Option<ManagedChild>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The last `lines` lines of the file at `path` (reading at most its last 256 KiB),
/// or a note saying why there are none.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 256 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(no log at {}: {error})", path.display()),
    }
}
