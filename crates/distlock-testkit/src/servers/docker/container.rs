//! One server's container, and one-shot commands in the server images.

use super::{DockerRun, PID_LABEL, RUN_LABEL, blocking, docker, docker_os};
use crate::servers::ServerError;
use crate::servers::child::{continue_tree, stop_tree};
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// One server's container: created and started by [`Container::run`], removed
/// when dropped.
#[derive(Debug)]
pub struct Container {
    name: String,
    address: IpAddr,
    run: Arc<DockerRun>,
}

impl Container {
    /// Starts `program args` in `image` on the run's network at `address`, with
    /// `dir` and `mounts` mounted at the same paths and the test's uid and gid.
    pub fn run(
        run: &Arc<DockerRun>,
        image: &str,
        address: IpAddr,
        program: &Path,
        args: &[OsString],
        dir: &Path,
        mounts: &[&Path],
    ) -> Result<Self, ServerError> {
        docker(&["image", "inspect", "--format", "{{.Id}}", image]).map_err(|_| {
            ServerError::Missing {
                binary: format!("docker image {image}"),
                install_hint: "`just images` (scripts/build-images; no registry needed)".into(),
            }
        })?;
        let name = format!(
            "distlock-{}-{}",
            run.run_id(),
            address.to_string().replace('.', "-")
        );
        let entrypoint = program.file_name().unwrap_or(program.as_os_str());
        let mut command: Vec<OsString> = [
            "run",
            "-d",
            "--name",
            &name,
            "--label",
            &format!("{RUN_LABEL}={}", run.run_id()),
            "--label",
            &format!("{PID_LABEL}={}", std::process::id()),
            "--network",
            run.network(),
            "--ip",
            &address.to_string(),
            "--user",
            &format!("{}:{}", nix::unistd::getuid(), nix::unistd::getgid()),
            "--workdir",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        command.push(dir.into());
        for dir in std::iter::once(dir).chain(mounts.iter().copied()) {
            command.push("-v".into());
            command.push(same_path(dir));
        }
        command.push("--entrypoint".into());
        command.push(entrypoint.into());
        command.push(image.into());
        command.extend(args.iter().cloned());
        let container = Container {
            name,
            address,
            run: run.clone(),
        };
        docker_os(command)?;
        Ok(container)
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its address on the run's network.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The address at which it reaches a listener of the test process: the
    /// host's own on the run's network.
    pub fn gateway(&self) -> IpAddr {
        self.run.gateway()
    }

    /// `running`, `paused`, `exited`... and the exit code and host pid.
    pub fn state(&self) -> Result<(String, i64, u32), ServerError> {
        let out = docker(&[
            "inspect",
            "--format",
            "{{.State.Status}} {{.State.ExitCode}} {{.State.Pid}}",
            &self.name,
        ])?;
        let mut fields = out.split_whitespace();
        let status = fields.next().unwrap_or("unknown").to_owned();
        let code = fields
            .next()
            .and_then(|code| code.parse().ok())
            .unwrap_or(-1);
        let pid = fields.next().and_then(|pid| pid.parse().ok()).unwrap_or(0);
        Ok((status, code, pid))
    }

    /// Stops every process of the container with SIGSTOP, sent from the host as
    /// to a native server (not `docker pause`, whose freezer gives up under
    /// load), and returns once every thread of them has stopped.
    pub fn pause(&self) -> Result<(), ServerError> {
        stop_tree(self.main_pid()?)
    }

    /// Lets a paused container run again (SIGCONT); a running one is left as it
    /// is.
    pub fn unpause(&self) -> Result<(), ServerError> {
        continue_tree(self.main_pid()?)
    }

    /// The host pid of the container's main process, the server, whose
    /// descendants are the container's other processes.
    fn main_pid(&self) -> Result<u32, ServerError> {
        match self.state()? {
            (status, _, pid) if status == "running" && pid != 0 => Ok(pid),
            _ => Err(ServerError::NotRunning {
                name: self.name.clone(),
            }),
        }
    }

    /// SIGKILLs the container's processes and waits until it has stopped.
    pub fn kill(&self) {
        if docker(&["kill", &self.name]).is_ok() {
            let _ = docker(&["wait", &self.name]);
        }
    }

    /// Sends `signal` (`SIGINT`, `SIGTERM`...) to the container's main process. A
    /// paused container receives it once thawed.
    pub fn signal(&self, signal: &str) -> Result<(), ServerError> {
        docker(&["kill", "--signal", signal, &self.name]).map(drop)
    }

    /// Starts the stopped container again: the same command, address and mounts.
    pub fn start(&self) -> Result<(), ServerError> {
        docker(&["start", &self.name]).map(drop)
    }

    /// SIGTERM, then SIGKILL after `grace` seconds; returns once it has stopped.
    pub async fn stop(&self, grace: std::time::Duration) {
        let seconds = grace.as_secs().max(1).to_string();
        let name = self.name.clone();
        let _ = self.unpause();
        let stopped =
            tokio::task::spawn_blocking(move || docker(&["stop", "-t", &seconds, &name])).await;
        if !matches!(stopped, Ok(Ok(_))) {
            tracing::warn!(name = %self.name, "docker stop failed");
        }
    }

    /// Sends `signal` (a server's own fast-shutdown signal), thaws the container
    /// if it was paused, and waits up to `grace` for it to exit (one blocking
    /// `docker wait`, no polling), then kills it. Does nothing if it is not running.
    pub async fn stop_with(&self, signal: &str, grace: std::time::Duration) {
        if self.signal(signal).is_err() {
            return;
        }
        let _ = self.unpause();
        let exited = tokio::process::Command::new("docker")
            .args(["wait", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status();
        if tokio::time::timeout(grace, exited).await.is_err() {
            tracing::warn!(name = %self.name, "no clean shutdown in time; killing");
            self.kill();
        }
    }

    /// Cuts the container off its network: its address stops answering and its
    /// peers stop reaching it, while its processes keep running.
    pub fn disconnect(&self) -> Result<(), ServerError> {
        docker(&["network", "disconnect", self.run.network(), &self.name]).map(drop)
    }

    /// Puts a cut-off container back on its network, at its own address.
    pub fn connect(&self) -> Result<(), ServerError> {
        docker(&[
            "network",
            "connect",
            "--ip",
            &self.address.to_string(),
            self.run.network(),
            &self.name,
        ])
        .map(drop)
    }

    /// The last `lines` lines of the container's output (stdout, then stderr).
    pub fn log_tail(&self, lines: usize) -> String {
        let output = blocking(|| {
            Command::new("docker")
                .args(["logs", "--tail", &lines.to_string(), &self.name])
                .stdin(Stdio::null())
                .output()
        });
        match output {
            Ok(output) => {
                let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stderr));
                text
            }
            Err(error) => format!("(no docker logs for {}: {error})", self.name),
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", "-v", &self.name]);
    }
}

/// A command for `program` inside the running container (`docker exec -i`), with
/// the container's user and environment.
pub fn exec_command(container: &Container, program: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("docker");
    command.args(["exec", "-i", container.name(), program]);
    command
}

/// `dir:dir`, a bind mount of `dir` at the same path.
fn same_path(dir: &Path) -> OsString {
    let mut mount = dir.as_os_str().to_owned();
    mount.push(":");
    mount.push(dir);
    mount
}

/// Runs `program args` to its end in a throwaway container of `image` (on the
/// run's network at an address of its own, `dir` mounted at the same path, the
/// test's uid), and returns its output. For one-shot helpers:
/// `mariadb-install-db`, a ZooKeeper digest, a PostgreSQL standby's base
/// backup, which copies its primary over the network.
pub async fn run_once(
    run: &DockerRun,
    image: &str,
    program: &Path,
    args: &[OsString],
    dir: &Path,
    env: &[(&str, &OsString)],
) -> Result<std::process::Output, ServerError> {
    let entrypoint = program.file_name().unwrap_or(program.as_os_str());
    let mut command = tokio::process::Command::new("docker");
    command
        .args(["run", "--rm", "--network", run.network(), "--ip"])
        .arg(run.next_address()?.to_string())
        .arg("--label")
        .arg(format!("{RUN_LABEL}={}", run.run_id()))
        .arg("--label")
        .arg(format!("{PID_LABEL}={}", std::process::id()))
        .arg("--user")
        .arg(format!(
            "{}:{}",
            nix::unistd::getuid(),
            nix::unistd::getgid()
        ))
        .arg("-v")
        .arg(same_path(dir));
    for (key, value) in env {
        let mut pair = OsString::from(*key);
        pair.push("=");
        pair.push(value);
        command.arg("-e").arg(pair);
    }
    command
        .arg("--entrypoint")
        .arg(entrypoint)
        .arg(image)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command.output().await.map_err(ServerError::io(format!(
        "run {} in {image}",
        entrypoint.to_string_lossy()
    )))
}
