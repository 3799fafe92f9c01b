//! A wall clock a test moves under a server it launches, to show what a clock
//! stepping back (tokens seeded from the server clock) or jumping forward
//! (keys expiring early) does.
//!
//! The server runs with `clock_offset.c` preloaded (`LD_PRELOAD`): its
//! `CLOCK_REALTIME`, `gettimeofday` and `time` give the real time plus an
//! offset read from a file at every call; monotonic clocks are untouched.
//! libfaketime does the same with `FAKETIME_TIMESTAMP_FILE`, but it cannot run
//! `redis-server` as Debian builds it: its start-up calls `dlsym`, which
//! allocates through jemalloc, which calls `clock_gettime` before libfaketime
//! is ready, and the server hangs (libfaketime issue #130). The shim uses
//! system calls only. It is compiled at run time with `cc`, which every Rust
//! toolchain already needs as its linker. A server in a container
//! (`DISTLOCK_LAUNCHER=docker`) gets the clock's directory mounted at the same
//! path, so the images need nothing for it: the shim links no libc symbol
//! newer than the images' glibc.

use super::ServerError;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The shim's source.
const SHIM: &str = include_str!("clock_offset.c");

/// A clock offset shared by the servers launched with it (see
/// [`super::RedisOptions::clock`], `MariaDbServer::start_with_clock`,
/// `PostgresServer::start_with_clock`); clones move the same clock.
#[derive(Debug, Clone)]
pub struct MovableClock {
    shim: PathBuf,
    offset: PathBuf,
    dir: Arc<tempfile::TempDir>,
}

impl MovableClock {
    /// Compiles the shim and starts at offset zero.
    pub fn new() -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("distlock-clock-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for the clock shim"))?;
        // Readable by a server that runs as another user (PostgreSQL under
        // root runs as `nobody`): the shim and the offset file are no secret.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(
            ServerError::io("open the clock shim's dir to the server's user"),
        )?;
        let (source, shim) = (
            dir.path().join("clock_offset.c"),
            dir.path().join("clock_offset.so"),
        );
        std::fs::write(&source, SHIM).map_err(ServerError::io("write the clock shim"))?;
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&shim)
            .arg(&source)
            .output()
            .map_err(ServerError::io("run cc to build the clock shim"))?;
        if !output.status.success() {
            return Err(ServerError::Command {
                command: "cc -shared clock_offset.c".into(),
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let clock = MovableClock {
            shim,
            offset: dir.path().join("offset"),
            dir: Arc::new(dir),
        };
        clock.set(0)?;
        Ok(clock)
    }

    /// The directory of the shim and the offset file, which a container
    /// running under this clock mounts.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets the servers' wall clocks `back` behind the real time, at once.
    pub fn set_back(&self, back: Duration) -> Result<(), ServerError> {
        self.set(-micros(back))
    }

    /// Moves the servers' wall clocks `by` further ahead of where they are, at
    /// once, as a clock stepping forward does: every key whose expiry is less
    /// than `by` away expires now.
    pub fn jump_ahead(&self, by: Duration) -> Result<(), ServerError> {
        self.shift(micros(by))
    }

    /// Moves the servers' wall clocks `by` further behind where they are, at
    /// once, as a clock stepped back by an operator or a bad time source
    /// does: a token seeded from the clock now starts lower, and every expiry
    /// already set lasts `by` longer.
    pub fn step_back(&self, by: Duration) -> Result<(), ServerError> {
        self.shift(-micros(by))
    }

    /// Adds `micros` to the offset.
    fn shift(&self, micros: i128) -> Result<(), ServerError> {
        let now = std::fs::read_to_string(&self.offset)
            .map_err(ServerError::io("read the clock offset"))?;
        let now: i128 = now.trim().parse().map_err(|_| {
            ServerError::Protocol(format!("the clock offset {now:?} is not a number"))
        })?;
        self.set(now.saturating_add(micros))
    }

    /// Sets the offset, in microseconds.
    fn set(&self, micros: i128) -> Result<(), ServerError> {
        // Written aside and renamed, so a server never reads half a number.
        let next = self.offset.with_extension("next");
        std::fs::write(&next, format!("{micros}\n"))
            .and_then(|()| std::fs::rename(&next, &self.offset))
            .map_err(ServerError::io("write the clock offset"))
    }

    /// `program args` run under this clock: through `env`, with the shim
    /// preloaded and the offset file named.
    pub(crate) fn wrap(&self, program: &Path, args: Vec<OsString>) -> (PathBuf, Vec<OsString>) {
        let mut preload = OsString::from("LD_PRELOAD=");
        preload.push(&self.shim);
        let mut offset = OsString::from("DISTLOCK_CLOCK_OFFSET_FILE=");
        offset.push(&self.offset);
        let mut wrapped = vec![preload, offset, program.as_os_str().to_owned()];
        wrapped.extend(args);
        (PathBuf::from("env"), wrapped)
    }
}

/// `d` in microseconds.
fn micros(d: Duration) -> i128 {
    i128::try_from(d.as_micros()).unwrap_or(i128::MAX)
}
