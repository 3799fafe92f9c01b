//! Child processes that never outlive the test: servers and lock holders.
//!
//! A [`ServerProcess`] is killed and reaped when dropped. Statics are never dropped,
//! and a test binary may itself be killed, so every child also gets a watchdog: a
//! tiny `sh` that blocks reading a pipe from the test process and SIGKILLs the child
//! when the pipe closes, which the kernel does when the test process dies.

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
    watchdog: Option<Child>,
}

impl ManagedChild {
    /// Spawns `command`, naming it `name` in errors.
    pub(crate) fn spawn(name: &str, command: &mut Command) -> Result<Self, ServerError> {
        let child = command
            .spawn()
            .map_err(ServerError::io(format!("spawn {name}")))?;
        let watchdog = spawn_watchdog(child.id());
        Ok(ManagedChild {
            name: name.to_owned(),
            child,
            exited: None,
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
                // The pid may be reused from now on: the watchdog must not fire.
                self.disarm_watchdog();
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

    /// SIGKILLs the child and reaps it.
    pub(crate) fn kill(&mut self) {
        self.disarm_watchdog();
        if self.exited.is_none() {
            // Errors mean it is already gone; `wait` below reaps it either way.
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    pub(crate) fn disarm_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns `sh` that SIGKILLs `pid` once the test process dies. Best effort: without
/// it, only the test process's own death leaks the child.
fn spawn_watchdog(pid: u32) -> Option<Child> {
    let spawned = Command::new("sh")
        .args(["-c", "read _ignored; kill -KILL \"$1\"", "distlock-watchdog"])
        .arg(pid.to_string())
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

/// A server child process: one command line, its output appended to one log file,
/// restartable with the same command line.
///
/// All methods take `&self`, so a server shared by several tests (for example in a
/// static) can still be paused, killed and restarted.
pub struct ServerProcess {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
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
    /// `log_path`. `name` identifies the process in errors.
    pub fn start(
        name: &str,
        program: &Path,
        args: Vec<OsString>,
        log_path: PathBuf,
    ) -> Result<Self, ServerError> {
        let process = ServerProcess {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            log_path,
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
        *slot = Some(ManagedChild::spawn(&self.name, &mut command)?);
        Ok(())
    }

    /// Polls `probe` until it returns true. Fails early, with the log tail, if the
    /// process exits, and after `timeout` if it never answers.
    pub async fn wait_ready<F, Fut>(&self, timeout: Duration, mut probe: F) -> Result<(), ServerError>
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
    pub fn pause(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGSTOP)
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGCONT)
    }

    /// Sends `signal` to the running process.
    pub fn signal(&self, signal: Signal) -> Result<(), ServerError> {
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
            child.disarm_watchdog();
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
