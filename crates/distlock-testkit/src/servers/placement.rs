//! Where a launched server runs: a child process on loopback (the default), or a
//! container on the test process's Docker network (`DISTLOCK_LAUNCHER=docker`).
//!
//! Each launcher asks [`place`] once per server and builds the same command line
//! either way; only the addresses differ. Natively the server listens on, and
//! clients dial, `127.0.0.1`. In a container it listens on every interface and
//! clients dial the container's own address, which a network cut takes away.

use super::docker::{self, DockerRun};
use super::{ServerError, find_binary};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable choosing the launcher: `native` (default) or `docker`.
pub const LAUNCHER_VAR: &str = "DISTLOCK_LAUNCHER";

/// How the testkit runs servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    /// Child processes of the test on free loopback ports.
    Native,
    /// One container per server, from the local images (`just images`).
    Docker,
}

static DEFAULT: std::sync::OnceLock<LauncherKind> = std::sync::OnceLock::new();

/// Makes `kind` this process's launcher when `DISTLOCK_LAUNCHER` is unset: a test
/// target that only makes sense in containers (network cuts) calls it first.
/// Returns false if another default was set before.
pub fn set_default_launcher(kind: LauncherKind) -> bool {
    DEFAULT.set(kind).is_ok() || DEFAULT.get() == Some(&kind)
}

/// The launcher `DISTLOCK_LAUNCHER` names (else the default: native, or the one
/// [`set_default_launcher`] set); an unknown value is an error saying which
/// values there are.
pub fn launcher() -> Result<LauncherKind, ServerError> {
    let default = DEFAULT.get().copied().unwrap_or(LauncherKind::Native);
    parse_launcher(std::env::var(LAUNCHER_VAR).ok().as_deref(), default)
}

fn parse_launcher(value: Option<&str>, default: LauncherKind) -> Result<LauncherKind, ServerError> {
    match value.map(str::trim).unwrap_or("") {
        "" => Ok(default),
        "native" => Ok(LauncherKind::Native),
        "docker" => Ok(LauncherKind::Docker),
        other => Err(ServerError::Protocol(format!(
            "{LAUNCHER_VAR}={other:?} is not a launcher: use `native` (the default) or `docker`"
        ))),
    }
}

/// Where one server runs, from [`place`].
#[derive(Debug, Clone)]
pub struct Placement {
    host: IpAddr,
    docker: Option<(Arc<DockerRun>, String)>,
    /// Directories of this machine the container mounts at the same path,
    /// beside the server's scratch dir.
    mounts: Vec<PathBuf>,
}

/// [`place`] for a server running under `clock` if given: in a container,
/// the clock's directory (its shim, built on this machine, and its offset
/// file) is mounted at the same path, so the preloaded shim reads the
/// offset the test moves.
pub(crate) fn place_under(
    server: &str,
    clock: Option<&super::MovableClock>,
) -> Result<Placement, ServerError> {
    let mut placement = place(server)?;
    if placement.is_container() {
        placement
            .mounts
            .extend(clock.map(|clock| clock.dir().to_owned()));
    }
    Ok(placement)
}

/// A place for one server of kind `server` (`redis`, `etcd`, `zookeeper`,
/// `mariadb`, `postgres`; a later backend adds its image to `scripts/build-images` and
/// passes its own name) under the launcher `DISTLOCK_LAUNCHER` names.
pub fn place(server: &str) -> Result<Placement, ServerError> {
    match launcher()? {
        LauncherKind::Native => Ok(Placement::native()),
        LauncherKind::Docker => {
            let run = docker::run()?;
            let host = run.next_address()?;
            Ok(Placement {
                host,
                docker: Some((run, docker::image(server))),
                mounts: Vec::new(),
            })
        }
    }
}

impl Placement {
    /// A child process on loopback, whatever `DISTLOCK_LAUNCHER` says.
    pub fn native() -> Self {
        Placement {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            docker: None,
            mounts: Vec::new(),
        }
    }

    /// The address clients dial: `127.0.0.1`, or the container's own.
    pub fn host(&self) -> IpAddr {
        self.host
    }

    /// The address the server listens on: `127.0.0.1`, or every interface in a
    /// container (so it listens again after a network cut is healed).
    pub fn bind(&self) -> IpAddr {
        match self.docker {
            None => self.host,
            Some(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }

    /// Whether the server runs in a container.
    pub fn is_container(&self) -> bool {
        self.docker.is_some()
    }

    /// The server binary: found on this machine natively (a missing one is an
    /// error with the install hint), or just its name, for the image's `PATH`.
    pub fn binary(&self, binary: &str, package: &str) -> Result<PathBuf, ServerError> {
        match self.docker {
            None => find_binary(binary, package),
            Some(_) => Ok(PathBuf::from(binary)),
        }
    }

    /// The directories the container mounts beside the scratch dir.
    pub(crate) fn mounts(&self) -> impl Iterator<Item = &Path> {
        self.mounts.iter().map(PathBuf::as_path)
    }

    pub(crate) fn docker(&self) -> Option<(&Arc<DockerRun>, &str)> {
        self.docker
            .as_ref()
            .map(|(run, image)| (run, image.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_values() {
        let native = LauncherKind::Native;
        assert_eq!(parse_launcher(None, native).unwrap(), native);
        assert_eq!(
            parse_launcher(Some(""), LauncherKind::Docker).unwrap(),
            LauncherKind::Docker
        );
        assert_eq!(
            parse_launcher(Some(" docker "), native).unwrap(),
            LauncherKind::Docker
        );
        assert_eq!(
            parse_launcher(Some("native"), LauncherKind::Docker).unwrap(),
            native
        );
        let error = parse_launcher(Some("podman"), native)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("DISTLOCK_LAUNCHER") && error.contains("docker"),
            "{error}"
        );
    }
}
