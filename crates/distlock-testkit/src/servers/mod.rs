//! Real servers launched as child processes for tests, or in containers.
//!
//! `DISTLOCK_LAUNCHER=docker` puts every server in a container of its local image
//! instead ([`placement`], [`docker`]); the launchers and harnesses are the same.
//! Every launcher starts its server on free ports in its own temp dir, waits
//! until the server answers (bounded, with the log tail in the error), and kills the
//! process when dropped. A missing server binary is an error naming the install
//! command, never a silent skip: skipping needs an explicit `DISTLOCK_TEST_SKIP`.

pub(crate) mod child;
mod clock;
pub mod docker;
pub mod etcd;
pub mod links;
pub mod mariadb;
pub mod nats;
pub mod placement;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod redis_cluster;
mod resp;
pub mod sentinel;
pub mod server;
mod sql;
pub mod tls;
pub mod zookeeper;

pub use clock::MovableClock;
pub use etcd::{EtcdCluster, EtcdServer, MemberStatus};
pub use links::PeerLinks;
pub use mariadb::MariaDbServer;
pub use nats::{NatsCluster, NatsServer};
pub use placement::{LauncherKind, Placement, launcher, place, set_default_launcher};
pub use postgres::PostgresServer;
pub use postgres::pgbouncer::PgBouncerServer;
pub use process::ServerProcess;
pub use redis::{RedisOptions, RedisServer};
pub use redis_cluster::RedisCluster;
pub use sentinel::{SentinelOptions, SentinelTopology};
pub use server::Server;
pub use sql::Sql;
pub use tls::{ServerTls, TestCertificates};
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperOptions, ZooKeeperServer};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A server the testkit launched, as a harness sees it: restart it, read its
/// log. [`crate::Harness::launched`] hands one out, and the harness's restart and
/// log hooks come from it.
#[async_trait::async_trait]
pub trait Launched: Send + Sync {
    /// Stops the server cleanly and starts it again on the same port and data.
    async fn restart(&self) -> Result<(), ServerError>;

    /// The last `lines` lines of its log.
    fn log_tail(&self, lines: usize) -> String;

    /// Its process, to pause, resume or kill it (a chaos run's server faults).
    fn process(&self) -> &ServerProcess;

    /// The wall clock it runs with, if the test can move it (a chaos run's
    /// clock jumps and steps back).
    fn clock(&self) -> Option<&MovableClock> {
        None
    }
}

macro_rules! launched {
    ($($server:ty $(=> $clock:ident)?),*) => {$(
        #[async_trait::async_trait]
        impl Launched for $server {
            async fn restart(&self) -> Result<(), ServerError> {
                <$server>::restart(self).await
            }

            fn log_tail(&self, lines: usize) -> String {
                ServerProcess::log_tail(self, lines)
            }

            fn process(&self) -> &ServerProcess {
                self
            }
            $(
                fn clock(&self) -> Option<&MovableClock> {
                    <$server>::$clock(self)
                }
            )?
        }
    )*};
}

launched!(
    RedisServer => clock,
    EtcdServer,
    ZooKeeperServer,
    MariaDbServer => clock,
    PostgresServer => clock,
    NatsServer
);

/// The command that installs every backend the suite launches.
pub const INSTALL_COMMAND: &str = "sudo scripts/install-backends";

/// How long a launcher waits for a freshly started server to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a server (or another child process of the testkit) could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The server binary is not installed; the message says how to install it.
    #[error("`{binary}` not found: install it with {install_hint}")]
    Missing {
        /// The binary that was looked for.
        binary: String,
        /// The command that installs it.
        install_hint: String,
    },
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The process exited while it was expected to run.
    #[error("{name} exited ({status}); log tail:\n{log_tail}")]
    Exited {
        /// Which process.
        name: String,
        /// Its exit status.
        status: String,
        /// The last lines it logged.
        log_tail: String,
    },
    /// The process did not become ready in time.
    #[error("{name} not ready after {waited:?}; log tail:\n{log_tail}")]
    NotReady {
        /// Which process.
        name: String,
        /// How long the launcher waited.
        waited: Duration,
        /// The last lines it logged.
        log_tail: String,
    },
    /// The operation needs a running process, and there is none.
    #[error("{name} is not running")]
    NotRunning {
        /// Which process.
        name: String,
    },
    /// A helper command (etcdctl, the mariadb client, ...) failed.
    #[error("{command} failed: {output}")]
    Command {
        /// The command, without secrets.
        command: String,
        /// What it printed.
        output: String,
    },
    /// The server answered something unexpected.
    #[error("{0}")]
    Protocol(String),
    /// A signal could not be delivered.
    #[error("cannot send {signal} to pid {pid}: {source}")]
    Signal {
        /// The target process.
        pid: u32,
        /// The signal's name.
        signal: String,
        /// The underlying error.
        #[source]
        source: nix::Error,
    },
}

impl ServerError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
        let context = context.into();
        move |source| ServerError::Io { context, source }
    }
}

/// The server to use instead of a launched one for `backend` (`redis`, `redlock`,
/// `etcd`, `zookeeper`, `mysql`, `postgres`), from `DISTLOCK_TEST_<BACKEND>_URL`.
///
/// Returns `None` when the variable is unset or blank. For `redlock` the value is a
/// comma-separated list of URLs.
pub fn external_url(backend: &str) -> Option<String> {
    let var = format!("DISTLOCK_TEST_{}_URL", backend.to_ascii_uppercase());
    std::env::var(var)
        .ok()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
}

/// The backends named in `DISTLOCK_TEST_SKIP=a,b`, lowercased and trimmed; empty when
/// the variable is unset.
pub fn skip_list() -> Vec<String> {
    parse_skip_list(&std::env::var("DISTLOCK_TEST_SKIP").unwrap_or_default())
}

fn parse_skip_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Finds `binary` on `PATH` or in the sbin directories (where Debian puts `mariadbd`,
/// and which a non-root `PATH` often lacks). `package` is the Debian package that
/// ships it, for the install hint.
pub(crate) fn find_binary(binary: &str, package: &str) -> Result<PathBuf, ServerError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let sbin = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(sbin)
        .map(|dir| dir.join(binary))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| ServerError::Missing {
            binary: binary.to_owned(),
            install_hint: format!("`{INSTALL_COMMAND}` (or `sudo apt-get install {package}`)"),
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Picks a loopback port that is free now and that this process has not handed out
/// before.
///
/// The port is released before the server binds it, so another process may take it
/// in between; launchers retry with a new port when their server exits at start. The
/// memory of handed-out ports keeps servers of one test binary from colliding.
pub fn free_port() -> Result<u16, ServerError> {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static GIVEN: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let given = GIVEN.get_or_init(Default::default);
    for _ in 0..64 {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(ServerError::io("bind a free loopback port"))?;
        let port = listener
            .local_addr()
            .map_err(ServerError::io("read a bound port"))?
            .port();
        if given
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port)
        {
            return Ok(port);
        }
    }
    Err(ServerError::Protocol(
        "no unused loopback port found in 64 tries".into(),
    ))
}

/// Runs `start` (which picks fresh ports each time) until it succeeds, retrying
/// when the server exits at start, which is what a port taken in the meantime looks
/// like. Other errors, and the third exit, are returned.
pub(crate) async fn retry_on_exit<T>(
    mut start: impl AsyncFnMut() -> Result<T, ServerError>,
) -> Result<T, ServerError> {
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        match start().await {
            Err(ServerError::Exited { name, log_tail, .. }) if attempt < ATTEMPTS => {
                attempt += 1;
                tracing::info!(%name, %log_tail, "exited at start; retrying on other ports");
            }
            result => return result,
        }
    }
}

/// Writes `contents` to `path`, readable by the owner only (configs may hold
/// passwords).
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), ServerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let context = || format!("write {}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| ServerError::Io {
            context: context(),
            source,
        })?;
    file.write_all(contents.as_bytes())
        .map_err(|source| ServerError::Io {
            context: context(),
            source,
        })
}

/// A random password of letters and digits.
pub(crate) fn random_password() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 24)
}

/// Percent-encodes `text` for the user-info part of a URL.
pub(crate) fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_list_is_lowercased_trimmed_and_drops_blanks() {
        assert_eq!(
            parse_skip_list(" ZooKeeper, mysql ,,"),
            ["zookeeper", "mysql"]
        );
        assert!(parse_skip_list("").is_empty());
    }

    #[test]
    fn missing_binary_names_the_install_command() {
        let error = find_binary("distlock-no-such-server", "no-such-package").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("sudo scripts/install-backends"),
            "{message}"
        );
        assert!(
            message.contains("apt-get install no-such-package"),
            "{message}"
        );
    }

    #[test]
    fn free_ports_are_never_handed_out_twice() {
        let ports: std::collections::HashSet<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 50);
    }

    #[test]
    fn url_encoding_escapes_reserved_characters() {
        assert_eq!(url_encode("a b@c:d/e"), "a%20b%40c%3Ad%2Fe");
        assert_eq!(url_encode("plain-._~"), "plain-._~");
    }
}
