//! Lock holders run as child processes, so a case can freeze or kill a client the
//! way a GC pause or a crash would, without touching the test process.
//!
//! The child's contract: print `HOLDING <token>` on a line of stdout once it holds
//! the lock, then keep holding until killed.

use crate::servers::ServerError;
use crate::servers::child::ManagedChild;
use crate::servers::process::log_tail;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;
use tempfile::TempDir;
use tokio::sync::mpsc;

/// The lock-holder binary the cases that kill a holder start.
static LOCK_HOLDER: OnceLock<&'static str> = OnceLock::new();

/// Names the lock-holder binary for the cases that kill a holder, once, before
/// the suite runs (a test binary's own path is known only to its target, as
/// `env!("CARGO_BIN_EXE_…")`). It follows the chaos holder's protocol (see
/// `chaos/holder.rs`): `HOLDER LOCK_URL KEY TTL_MS GO_FILE`, printing
/// `HOLDING <token> <remaining_ms>` once it holds the lock, then holding it
/// until GO_FILE exists.
pub fn use_lock_holder(binary: &'static str) {
    // A second call names the same binary; the first one stands.
    let _ = LOCK_HOLDER.set(binary);
}

/// The binary [`use_lock_holder`] named, if any.
pub(crate) fn lock_holder() -> Option<&'static str> {
    LOCK_HOLDER.get().copied()
}

/// A lock-holding child process; killed and reaped when dropped.
pub struct HolderProcess {
    child: Mutex<ManagedChild>,
    pid: u32,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    stderr_dir: TempDir,
}

impl std::fmt::Debug for HolderProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HolderProcess")
            .field("pid", &self.pid)
            .field("running", &self.is_running())
            .finish()
    }
}

impl HolderProcess {
    /// Starts `command` with stdout captured line by line and stderr kept for error
    /// messages. Stdout is drained continuously, so the child never blocks on it.
    pub fn spawn(mut command: Command) -> Result<Self, ServerError> {
        let stderr_dir = tempfile::Builder::new()
            .prefix("distlock-holder-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for a holder"))?;
        let stderr = std::fs::File::create(stderr_dir.path().join("stderr.log"))
            .map_err(ServerError::io("create a holder's stderr log"))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let name = command.get_program().to_string_lossy().into_owned();
        let mut child =
            ManagedChild::spawn(&format!("holder {name}"), &mut command, stderr_dir.path())?;
        let stdout = child
            .child_mut()
            .stdout
            .take()
            .ok_or_else(|| ServerError::Protocol("holder stdout was not captured".into()))?;
        let (sender, lines) = mpsc::unbounded_channel();
        // A plain thread: it needs no runtime and ends when the child's stdout closes.
        std::thread::Builder::new()
            .name(format!("holder-{}-stdout", child.pid()))
            .spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(ServerError::io("start the holder's stdout reader"))?;
        Ok(HolderProcess {
            pid: child.pid(),
            child: Mutex::new(child),
            lines,
            seen: Vec::new(),
            stderr_dir,
        })
    }

    /// Waits for the `HOLDING <token>` line and returns the token. Fails if the child
    /// exits first, prints a malformed `HOLDING` line, or `timeout` passes.
    pub async fn wait_holding(&mut self, timeout: Duration) -> Result<u64, ServerError> {
        let line = self.wait_line("HOLDING ", timeout).await?;
        let token = line.trim_start_matches("HOLDING ").trim();
        token.parse().map_err(|_| {
            ServerError::Protocol(format!("holder printed a malformed line: {line:?}"))
        })
    }

    /// Waits for the next stdout line starting with `prefix` and returns it whole;
    /// earlier lines are skipped (and kept for error messages).
    pub async fn wait_line(
        &mut self,
        prefix: &str,
        timeout: Duration,
    ) -> Result<String, ServerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.starts_with(prefix) => return Ok(line),
                Ok(Some(line)) => self.seen.push(line),
                Ok(None) => return Err(self.exited_error().await),
                Err(_) => {
                    return Err(ServerError::NotReady {
                        name: format!("holder (pid {}) line {prefix:?}", self.pid),
                        waited: timeout,
                        log_tail: self.output_tail(),
                    });
                }
            }
        }
    }

    /// The child's process id (it may have exited since).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the child is still running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.lock().exit_status().is_none()
    }

    /// Freezes the child (SIGSTOP), as a long GC pause would. Returns once every
    /// thread of the child has stopped.
    pub fn pause(&self) -> Result<(), ServerError> {
        self.lock().pause()
    }

    /// Lets a paused child run again (SIGCONT).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.lock().resume()
    }

    /// Kills the child with SIGKILL, as a crash would, and reaps it: on return the
    /// process no longer exists. Does nothing if it already exited.
    pub fn kill(&self) {
        self.lock().kill();
    }

    /// The stdout lines seen so far and the last lines of stderr.
    pub fn output_tail(&self) -> String {
        let stdout = self.seen.join("\n");
        let stderr = log_tail(&self.stderr_dir.path().join("stderr.log"), 20);
        format!("stdout:\n{stdout}\nstderr:\n{stderr}")
    }

    /// Stdout closed: the child is exiting. Give it a moment to be reaped so the
    /// error can name its exit status.
    async fn exited_error(&self) -> ServerError {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut status = self.lock().exit_status();
        while status.is_none() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            status = self.lock().exit_status();
        }
        ServerError::Exited {
            name: format!("holder (pid {})", self.pid),
            status: status.map_or_else(|| "stdout closed".into(), |s| s.to_string()),
            log_tail: self.output_tail(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ManagedChild> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
