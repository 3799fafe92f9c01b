//! The container side of the launchers: one Docker network per test process, and
//! one container per server, driven through the `docker` CLI.
//!
//! A server runs the very command line its native launcher builds, in the local
//! image of its server (`distlock/<server>:local`, or `DISTLOCK_<SERVER>_IMAGE`),
//! with its scratch dir mounted at the same path, as the test's own uid. Every
//! container sits on the test process's network with an address of its own, so a
//! server can be cut off (`docker network disconnect`) while others stay reachable;
//! the host reaches those addresses directly (Linux routes to bridge networks).
//!
//! Cleanup: every container and the network carry the labels `distlock.run` (this
//! process's run id) and `distlock.pid`. A dropped server removes its container; a
//! watchdog `sh` in its own process group (so a Ctrl-C does not reach it) removes
//! whatever is left of the run once the test process exits, dies or is killed
//! (its containers, its network, then the scratch dirs of its servers, which a
//! server never dropped, such as one a finished suite still held, leaves); and
//! the first launch of a run sweeps containers and networks whose `distlock.pid` no
//! longer exists (a run whose watchdog could not finish).

use super::{ServerError, find_binary};
use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

mod container;
pub use container::{Container, exec_command, run_once};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The label every container and network of the docker launcher carries.
pub const RUN_LABEL: &str = "distlock.run";
/// The label holding the pid of the test process that created the object.
pub const PID_LABEL: &str = "distlock.pid";

/// The Docker side of one test process: its network and the next free address.
#[derive(Debug)]
pub struct DockerRun {
    run_id: String,
    network: String,
    /// The second octet of the network's `10.N.0.0/16`.
    octet: u8,
    next_host: AtomicU32,
    _watchdog: Option<Child>,
    /// The watchdog's stdin: the scratch dirs it removes, one per line. Open
    /// until this process ends, which the watchdog sees as the end of input.
    scratch_dirs: Mutex<Option<ChildStdin>>,
}

/// The run of this process, created (with its network) on first use. Fails with
/// what is missing when there is no `docker` binary or no reachable engine.
pub fn run() -> Result<Arc<DockerRun>, ServerError> {
    static RUN: OnceLock<Result<Arc<DockerRun>, String>> = OnceLock::new();
    RUN.get_or_init(|| DockerRun::create().map(Arc::new).map_err(|e| e.to_string()))
        .clone()
        .map_err(ServerError::Protocol)
}

impl DockerRun {
    fn create() -> Result<Self, ServerError> {
        find_binary("docker", "docker.io")?;
        docker(&["info", "--format", "{{.ServerVersion}}"]).map_err(|error| {
            ServerError::Protocol(format!(
                "DISTLOCK_LAUNCHER=docker needs a running Docker engine this user may use \
                 (is dockerd running? is the user in the `docker` group?): {error}"
            ))
        })?;
        sweep_dead_runs();
        let pid = std::process::id();
        let run_id = format!(
            "{pid}-{}",
            super::random_password()[..6].to_ascii_lowercase()
        );
        let network = format!("distlock-{run_id}");
        let octet = create_network(&network, &run_id)?;
        let mut watchdog = spawn_watchdog(&run_id, &network);
        let scratch_dirs = Mutex::new(watchdog.as_mut().and_then(|w| w.stdin.take()));
        Ok(DockerRun {
            run_id,
            network,
            octet,
            next_host: AtomicU32::new(2),
            _watchdog: watchdog,
            scratch_dirs,
        })
    }

    /// Has the watchdog remove `dir`, a server's scratch dir mounted into its
    /// container, once this process ends (best effort, as the watchdog is).
    pub(crate) fn remove_on_exit(&self, dir: &Path) {
        let mut stdin = self
            .scratch_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(stdin) = stdin.as_mut() {
            let mut line = dir.as_os_str().as_bytes().to_vec();
            line.push(b'\n');
            let _ = stdin.write_all(&line);
        }
    }

    /// A fresh address on the run's network, for one container.
    pub fn next_address(&self) -> Result<IpAddr, ServerError> {
        let host = self.next_host.fetch_add(1, Ordering::Relaxed);
        if host >= 0xFFFF {
            return Err(ServerError::Protocol(format!(
                "network {} has no free address left",
                self.network
            )));
        }
        let [_, _, high, low] = host.to_be_bytes();
        Ok(IpAddr::V4(Ipv4Addr::new(10, self.octet, high, low)))
    }

    /// The run's id, in its containers' names and `distlock.run` labels.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The host's own address on the run's network (its bridge), where a
    /// container reaches a listener of the test process.
    pub fn gateway(&self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, self.octet, 0, 1))
    }

    /// The run's network name.
    pub fn network(&self) -> &str {
        &self.network
    }
}

/// Creates the run's network on the first free `10.N.0.0/16` (N from 64 up,
/// starting at a point picked from the pid, so concurrent runs rarely collide).
fn create_network(network: &str, run_id: &str) -> Result<u8, ServerError> {
    let start = (std::process::id() % 160) as u8;
    let mut last_error = String::new();
    for step in 0..160u8 {
        let octet = 64 + (start.wrapping_add(step) % 160);
        let subnet = format!("10.{octet}.0.0/16");
        let created = docker(&[
            "network",
            "create",
            "--driver=bridge",
            &format!("--subnet={subnet}"),
            "--label",
            &format!("{RUN_LABEL}={run_id}"),
            "--label",
            &format!("{PID_LABEL}={}", std::process::id()),
            network,
        ]);
        match created {
            Ok(_) => return Ok(octet),
            Err(error) => last_error = error.to_string(),
        }
    }
    Err(ServerError::Protocol(format!(
        "could not create docker network {network} on any 10.N.0.0/16: {last_error}"
    )))
}

/// Removes the containers and networks of runs whose test process is gone.
fn sweep_dead_runs() {
    let alive = |pid: &str| {
        pid.parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    };
    let format = format!("{{{{.ID}}}} {{{{.Label \"{PID_LABEL}\"}}}}");
    let filter = format!("label={RUN_LABEL}");
    let dead = |listing: Result<String, ServerError>| -> Vec<String> {
        listing
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, pid)| !alive(pid))
            .map(|(id, _)| id.to_owned())
            .collect()
    };
    let containers = dead(docker(&[
        "ps", "-a", "--filter", &filter, "--format", &format,
    ]));
    if !containers.is_empty() {
        tracing::info!(
            count = containers.len(),
            "removing containers of dead test runs"
        );
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(containers.iter().map(String::as_str));
        let _ = docker(&args);
    }
    let networks = dead(docker(&[
        "network", "ls", "--filter", &filter, "--format", &format,
    ]));
    for network in networks {
        let _ = docker(&["network", "rm", &network]);
    }
}

/// On EOF of its stdin (this process exited or died), removes the run's
/// containers, then its network, then the scratch dirs its stdin named, one per
/// line (those of servers that were dropped are gone already).
const WATCHDOG_SCRIPT: &str = r#"dirs=$(cat)
ids=$(docker ps -aq --filter "label=$1")
[ -n "$ids" ] && docker rm -f -v $ids >/dev/null 2>&1
docker network rm "$2" >/dev/null 2>&1
printf '%s\n' "$dirs" | while IFS= read -r dir; do [ -n "$dir" ] && rm -rf -- "$dir"; done
exit 0"#;

fn spawn_watchdog(run_id: &str, network: &str) -> Option<Child> {
    use std::os::unix::process::CommandExt;
    let spawned = Command::new("sh")
        .args(["-c", WATCHDOG_SCRIPT, "distlock-docker-watchdog"])
        .arg(format!("{RUN_LABEL}={run_id}"))
        .arg(network)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match spawned {
        Ok(watchdog) => Some(watchdog),
        Err(error) => {
            tracing::warn!(%error, "no docker watchdog: a killed test may leave containers (the next run sweeps them)");
            None
        }
    }
}

/// Runs `docker args` and returns its stdout, or an error with its stderr.
pub fn docker(args: &[&str]) -> Result<String, ServerError> {
    docker_os(args.iter().map(OsString::from))
}

/// Runs `call`, which waits for the `docker` CLI (a second or more on a loaded
/// machine), without stalling the runtime: on a multi-threaded runtime's worker
/// the worker's other tasks move to another thread first. The conformance suite
/// shares one 4-thread runtime among all cases, and a plain blocking call there
/// once starved Redlock's 250 ms node timeouts.
pub(crate) fn blocking<T>(call: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(call),
        _ => call(),
    }
}

pub(crate) fn docker_os(args: impl IntoIterator<Item = OsString>) -> Result<String, ServerError> {
    blocking(|| docker_now(args))
}

fn docker_now(args: impl IntoIterator<Item = OsString>) -> Result<String, ServerError> {
    let args: Vec<OsString> = args.into_iter().collect();
    // The subcommand and container, for errors; the rest may be a password.
    let shown: Vec<String> = args
        .iter()
        .take(2)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let output = Command::new("docker")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(ServerError::io(format!("run docker {}", shown.join(" "))))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(ServerError::Command {
            command: format!("docker {}", shown.join(" ")),
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// The image for `server` (`redis`, `etcd`, `zookeeper`, `mariadb`, `postgres`):
/// `DISTLOCK_<SERVER>_IMAGE`, as the compose files read it, else
/// `distlock/<server>:local`.
pub fn image(server: &str) -> String {
    std::env::var(format!("DISTLOCK_{}_IMAGE", server.to_ascii_uppercase()))
        .ok()
        .map(|image| image.trim().to_owned())
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| format!("distlock/{server}:local"))
}
