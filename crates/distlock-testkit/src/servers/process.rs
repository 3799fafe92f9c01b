//! Server processes: one command line, restartable, run as a child process that
//! never outlives the test, or in a container (see [`super::docker`]).

use super::child::ManagedChild;
use super::docker::Container;
use super::{Placement, ServerError};
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How often readiness and exit are polled.
const POLL: Duration = Duration::from_millis(20);
/// Longest single readiness probe, so a hung probe cannot eat the whole timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A server child process: one command line, run with its own scratch dir and its
/// output appended to `server.log` there, restartable with the same command line.
///
/// Started with [`start_at`](Self::start_at) on a docker [`Placement`], the same
/// command line runs in a container instead, and every operation maps to one:
/// pause is SIGSTOP of the container's processes from the host (as natively; the
/// cgroup freezer of `docker pause` gives up under load), kill is `docker kill`,
/// respawn is `docker start`, the log is `docker logs`, and
/// [`disconnect`](Self::disconnect) cuts it off its network.
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
    container: Option<Container>,
}

impl std::fmt::Debug for ServerProcess {
    // Arguments are left out: they may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("pid", &self.pid())
            .field("log_path", &self.log_path)
            .field("container", &self.container.as_ref().map(Container::name))
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
        let process = Self::new(name, program, args, dir, None);
        process.respawn()?;
        Ok(process)
    }

    /// Like [`start`](Self::start) where `placement` says: a child process, or a
    /// container of `placement`'s image (with `dir` mounted at the same path and
    /// `program` looked up on the image's `PATH` by its file name).
    pub fn start_at(
        placement: &Placement,
        name: &str,
        program: &Path,
        args: Vec<OsString>,
        dir: &Path,
    ) -> Result<Self, ServerError> {
        let Some((run, image)) = placement.docker() else {
            return Self::start(name, program, args, dir);
        };
        let mounts: Vec<&Path> = placement.mounts().collect();
        let container = Container::run(run, image, placement.host(), program, &args, dir, &mounts)?;
        run.remove_on_exit(dir);
        Ok(Self::new(name, program, args, dir, Some(container)))
    }

    fn new(
        name: &str,
        program: &Path,
        args: Vec<OsString>,
        dir: &Path,
        container: Option<Container>,
    ) -> Self {
        ServerProcess {
            name: name.to_owned(),
            program: program.to_owned(),
            args,
            dir: dir.to_owned(),
            log_path: dir.join("server.log"),
            child: Mutex::new(None),
            container,
        }
    }

    /// The container this server runs in, when it was placed in one.
    pub fn container(&self) -> Option<&Container> {
        self.container.as_ref()
    }

    /// Cuts a containerised server off its network (`docker network disconnect`):
    /// it keeps running, but neither clients nor peers reach it. Native servers
    /// have no network of their own; use a fault proxy for them.
    pub fn disconnect(&self) -> Result<(), ServerError> {
        self.need_container("network cut")?.disconnect()
    }

    /// Puts a server cut off by [`disconnect`](Self::disconnect) back on its network.
    pub fn reconnect(&self) -> Result<(), ServerError> {
        self.need_container("network reconnect")?.connect()
    }

    fn need_container(&self, what: &str) -> Result<&Container, ServerError> {
        self.container.as_ref().ok_or_else(|| {
            ServerError::Protocol(format!(
                "a {what} of {} needs DISTLOCK_LAUNCHER=docker; a native server has no network of its own",
                self.name
            ))
        })
    }

    /// Starts the same command line again. Fails if the process is still running.
    pub fn respawn(&self) -> Result<(), ServerError> {
        if let Some(container) = &self.container {
            if self.check_running().is_ok() {
                return Err(ServerError::Protocol(format!(
                    "{} is already running",
                    self.name
                )));
            }
            return container.start();
        }
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

    /// [`stop`](Self::stop)s the process if it runs, starts the same command
    /// line again and waits until `probe` answers, as [`wait_ready`](Self::wait_ready).
    pub async fn restart<F, Fut>(
        &self,
        grace: Duration,
        timeout: Duration,
        probe: F,
    ) -> Result<(), ServerError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        self.stop(grace).await;
        self.respawn()?;
        self.wait_ready(timeout, probe).await
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
        // Asking the engine costs a `docker inspect`: every 10th poll is enough.
        let check_every = if self.container.is_some() { 10 } else { 1 };
        let mut polls = 0u32;
        loop {
            if polls.is_multiple_of(check_every) {
                self.check_running()?;
            }
            polls = polls.wrapping_add(1);
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
        if let Some(container) = &self.container {
            return match container.state()? {
                (status, _, _) if status == "running" => Ok(()),
                (status, code, _) if status == "exited" || status == "dead" => {
                    Err(ServerError::Exited {
                        name: self.name.clone(),
                        status: format!("container {status}, exit code {code}"),
                        log_tail: self.log_tail(40),
                    })
                }
                _ => Err(ServerError::NotRunning {
                    name: self.name.clone(),
                }),
            };
        }
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
        if let Some(container) = &self.container {
            return match container.state() {
                Ok((status, _, pid)) if status == "running" => Some(pid),
                _ => None,
            };
        }
        let mut slot = self.lock();
        let child = slot.as_mut()?;
        child.exit_status().is_none().then(|| child.pid())
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Freezes the process and every process it started with SIGSTOP: its sockets
    /// stay open and nothing answers. Returns once every thread of them has stopped.
    pub fn pause(&self) -> Result<(), ServerError> {
        if let Some(container) = &self.container {
            return container.pause();
        }
        self.with_child(ManagedChild::pause)
    }

    /// Lets a paused process run again (SIGCONT), with every process it started.
    pub fn resume(&self) -> Result<(), ServerError> {
        if let Some(container) = &self.container {
            return container.unpause();
        }
        self.with_child(ManagedChild::resume)
    }

    /// Sends `signal` to the running process.
    pub(crate) fn signal(&self, signal: Signal) -> Result<(), ServerError> {
        self.with_child(|child| child.signal(signal))
    }

    /// Runs `act` on the child process, or fails if there is none.
    fn with_child(
        &self,
        act: impl FnOnce(&mut ManagedChild) -> Result<(), ServerError>,
    ) -> Result<(), ServerError> {
        match self.lock().as_mut() {
            Some(child) => act(child),
            None => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
        }
    }

    /// Kills the process with SIGKILL, as a crash would, and reaps it. Does nothing
    /// if it is not running. On return the process no longer exists.
    pub fn kill(&self) {
        if let Some(container) = &self.container {
            return container.kill();
        }
        if let Some(child) = self.lock().as_mut() {
            child.kill();
        }
    }

    /// Asks the process to shut down (SIGTERM, resuming it if paused) and waits up to
    /// `grace` for it to exit, then kills it. On return the process no longer exists.
    pub async fn stop(&self, grace: Duration) {
        if let Some(container) = &self.container {
            if self.is_running() {
                container.stop(grace).await;
            }
            return;
        }
        {
            let mut slot = self.lock();
            let Some(child) = slot.as_mut() else { return };
            if child.signal(Signal::SIGTERM).is_err() {
                return;
            }
            let _ = child.resume();
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
        if let Some(container) = &self.container {
            return container.log_tail(lines);
        }
        log_tail(&self.log_path, lines)
    }

    /// The file receiving the process's stdout and stderr (a container's output
    /// goes to `docker logs` instead: read it with [`log_tail`](Self::log_tail)).
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
