//! How the PostgreSQL launcher runs the server's programs: where the binaries
//! are, as which user (`nobody` through `setpriv` under root), natively or in a
//! one-shot container, and the `pg_isready` probe. Apart from the server's
//! lifecycle so that file reads as start, stop, restart and `psql`.

use super::{READY_TIMEOUT, SUPERUSER};
use crate::servers::process::ServerProcess;
use crate::servers::{Placement, ServerError, find_binary};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The Debian package of the server binaries, for the install hint.
const PACKAGE: &str = "postgresql-15";
/// Who runs the server when the tests run as root.
const UNPRIVILEGED: &str = "nobody";

/// The newest `/usr/lib/postgresql/<version>/bin` holding `postgres` (Debian's
/// layout), else the directory of `postgres` on `PATH`.
pub(super) fn server_bin_dir() -> Result<PathBuf, ServerError> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let postgres = find_binary("postgres", PACKAGE)?;
    let dir = postgres.parent().map(Path::to_owned).unwrap_or_default();
    for tool in ["initdb", "pg_isready", "psql"] {
        if !dir.join(tool).is_file() {
            return Err(ServerError::Missing {
                binary: tool.into(),
                install_hint: format!(
                    "`{}` (or `sudo apt-get install {PACKAGE}`)",
                    crate::servers::INSTALL_COMMAND
                ),
            });
        }
    }
    Ok(dir)
}

/// Who runs the server's commands: this process's user, or `nobody` under root.
pub(super) struct Runner {
    /// (uid, gid) to switch to, when running as root.
    switch: Option<(u32, u32)>,
    setpriv: Option<PathBuf>,
}

impl Runner {
    pub(super) fn current() -> Result<Self, ServerError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Runner {
                switch: None,
                setpriv: None,
            });
        }
        let user = nix::unistd::User::from_name(UNPRIVILEGED)
            .ok()
            .flatten()
            .ok_or_else(|| {
                ServerError::Protocol(format!(
                    "PostgreSQL cannot run as root and there is no `{UNPRIVILEGED}` user to run it as"
                ))
            })?;
        Ok(Runner {
            switch: Some((user.uid.as_raw(), user.gid.as_raw())),
            setpriv: Some(find_binary("setpriv", "util-linux")?),
        })
    }

    /// Gives `dir` to the server's user.
    pub(super) fn own(&self, dir: &Path) -> Result<(), ServerError> {
        match self.switch {
            Some((uid, gid)) => std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(
                ServerError::io(format!("chown {} to {UNPRIVILEGED}", dir.display())),
            ),
            None => Ok(()),
        }
    }

    /// The program to start for `binary`: `setpriv` when switching users.
    pub(super) fn program(&self, binary: &Path) -> PathBuf {
        self.setpriv.clone().unwrap_or_else(|| binary.to_owned())
    }

    /// `setpriv`'s arguments up to `binary` when switching users, else none.
    pub(super) fn prefix(&self, binary: &Path) -> Vec<OsString> {
        match self.switch {
            Some((uid, gid)) => vec![
                format!("--reuid={uid}").into(),
                format!("--regid={gid}").into(),
                "--clear-groups".into(),
                "--".into(),
                binary.into(),
            ],
            None => Vec::new(),
        }
    }
}

/// A client tool of the server (`psql`, `pg_isready`): this machine's, or the
/// image's through `docker exec` in the server's container.
pub(super) fn tool(bin: &Path, process: &ServerProcess, name: &str) -> tokio::process::Command {
    match process.container() {
        Some(container) => crate::servers::docker::exec_command(container, name),
        None => tokio::process::Command::new(bin.join(name)),
    }
}

/// Runs `binary args` (as the runner's user) to its end, natively or in a one-shot
/// container of the image, keeping its output in `log`; a failure carries the
/// output's tail.
pub(super) async fn run_to_end(
    placement: &Placement,
    runner: &Runner,
    binary: &Path,
    args: &[OsString],
    scratch: &Path,
    log: &Path,
) -> Result<(), ServerError> {
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    let program = runner.program(binary);
    let run = async {
        match placement.docker() {
            Some((_, image)) => {
                crate::servers::docker::run_once(image, &program, args, scratch, &[]).await
            }
            None => {
                let mut command = tokio::process::Command::new(&program);
                command.args(args).kill_on_drop(true);
                command
                    .output()
                    .await
                    .map_err(ServerError::io(format!("run {name}")))
            }
        }
    };
    let output = tokio::time::timeout(READY_TIMEOUT, run)
        .await
        .map_err(|_| ServerError::Command {
            command: name.to_string(),
            output: format!("no result within {READY_TIMEOUT:?}"),
        })??;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    // Kept for post-mortems; a failure to write it must not hide the result.
    let _ = std::fs::write(log, &text);
    if output.status.success() {
        return Ok(());
    }
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(ServerError::Command {
        command: name.to_string(),
        output: tail.join("\n"),
    })
}

/// `pg_isready` against the server's socket: true once it accepts logins.
pub(super) struct Probe {
    bin: PathBuf,
    socket_dir: PathBuf,
    port: u16,
}

impl Probe {
    pub(super) fn new(bin: &Path, socket_dir: &Path, port: u16) -> Self {
        Probe {
            bin: bin.to_owned(),
            socket_dir: socket_dir.to_owned(),
            port,
        }
    }

    pub(super) async fn ready(&self, process: &ServerProcess) -> bool {
        tool(&self.bin, process, "pg_isready")
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
                "-d",
                "postgres",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status()
            .await
            .is_ok_and(|status| status.success())
    }
}
