//! How the PostgreSQL launcher runs the server's programs: where the binaries
//! are, as which user (`nobody` through `setpriv` under root), and how the
//! superuser logs in over the socket (`psql`, the `pg_isready` probe). Apart
//! from the server's lifecycle so that file reads as start, stop, restart and SQL.

use super::SUPERUSER;
use crate::servers::process::ServerProcess;
use crate::servers::{ServerError, find_binary};
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

/// How the superuser reaches the server: over its Unix socket, with the
/// server's client tools (`psql`, `pg_isready`).
#[derive(Debug)]
pub(super) struct SocketLogin {
    bin: PathBuf,
    socket_dir: PathBuf,
    port: u16,
}

impl SocketLogin {
    pub(super) fn new(bin: &Path, socket_dir: &Path, port: u16) -> Self {
        SocketLogin {
            bin: bin.to_owned(),
            socket_dir: socket_dir.to_owned(),
            port,
        }
    }

    pub(super) fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The client tool `name`, this machine's or the image's through `docker
    /// exec` in the server's container, logged in as the superuser to `database`.
    pub(super) fn tool(
        &self,
        process: &ServerProcess,
        name: &str,
        database: &str,
    ) -> tokio::process::Command {
        let mut command = match process.container() {
            Some(container) => crate::servers::docker::exec_command(container, name),
            None => tokio::process::Command::new(self.bin.join(name)),
        };
        command.arg("-h").arg(&self.socket_dir).args([
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
            "-d",
            database,
        ]);
        command
    }

    /// `pg_isready`: true once the server accepts logins.
    pub(super) async fn ready(&self, process: &ServerProcess) -> bool {
        self.tool(process, "pg_isready", "postgres")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status()
            .await
            .is_ok_and(|status| status.success())
    }
}
