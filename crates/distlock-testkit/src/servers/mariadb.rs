//! MariaDB launcher: `mariadb-install-db` into a temp datadir, then `mariadbd` on a
//! free loopback port, with a `distlock` database and a password-protected user.

use super::clock::MovableClock;
use super::placement::place_under;
use super::process::ServerProcess;
use super::server::Server;
use super::sql::{DATABASE, Sql, USER, run_setup, run_sql};
use super::tls::ServerTls;
use super::{Placement, ServerError, free_port, retry_on_exit};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

mod replica;

/// Install plus first start; slow disks make the install the long part.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Server settings shared by the install and the server: small and fast to start,
/// no binlog, no performance schema. No `--log-error`, so the log goes to stderr
/// and into the process log file.
const SERVER_FLAGS: &[&str] = &[
    "--skip-log-bin",
    "--skip-name-resolve",
    "--performance-schema=OFF",
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=16M",
    "--innodb-buffer-pool-dump-at-shutdown=OFF",
    "--innodb-buffer-pool-load-at-startup=OFF",
    // Native AIO contexts are a machine-wide budget that several servers can exhaust.
    "--innodb-use-native-aio=OFF",
    "--character-set-server=utf8mb4",
    "--max-connections=1000",
];

/// A `mariadbd` child process on a free loopback port, with its datadir in its own
/// temp dir, a `distlock` database, and a `distlock` user with a random password
/// allowed everything on that database.
///
/// The process is killed when this value is dropped.
pub type MariaDbServer = Server<Sql<MariaDb>>;

/// What a MariaDB server adds to a SQL [`Server`]: where `root` logs in.
#[derive(Debug)]
pub struct MariaDb {
    socket: PathBuf,
    client: PathBuf,
}

impl MariaDbServer {
    /// Creates a datadir, starts the server, and creates the database and user;
    /// returns once the server accepts logins.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_inner(None, None).await
    }

    /// Like [`start`](Self::start), with a wall clock the test moves (see
    /// [`MovableClock`]).
    pub async fn start_with_clock(clock: &MovableClock) -> Result<Self, ServerError> {
        Self::start_inner(None, Some(clock)).await
    }

    /// Like [`start`](Self::start), with TLS offered on the same port (clients
    /// choose it); with [`ServerTls::require_client_cert`] the test user must
    /// log in over TLS with a certificate signed by the CA (`REQUIRE X509`).
    pub async fn start_tls(tls: &ServerTls) -> Result<Self, ServerError> {
        Self::start_inner(Some(tls), None).await
    }

    async fn start_inner(
        tls: Option<&ServerTls>,
        clock: Option<&MovableClock>,
    ) -> Result<Self, ServerError> {
        Self::start_at(place_under("mariadb", clock)?, tls, clock, false).await
    }

    /// Starts a server at `placement`; with `binlog`, writing a binary log
    /// that a replica reads (`replica.rs`), its server id its port.
    async fn start_at(
        placement: Placement,
        tls: Option<&ServerTls>,
        clock: Option<&MovableClock>,
        binlog: bool,
    ) -> Result<Self, ServerError> {
        let server = placement.binary("mariadbd", "mariadb-server")?;
        let install = placement.binary("mariadb-install-db", "mariadb-server")?;
        let client = placement.binary("mariadb", "mariadb-client")?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-mariadb-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for mariadb"))?;
        let datadir = dir.path().join("data");
        let socket = dir.path().join("mysqld.sock");
        // A private tmpdir: concurrent installs sharing /tmp collide on temp tables.
        let tmpdir = dir.path().join("tmp");
        std::fs::create_dir_all(&tmpdir).map_err(ServerError::io("create mariadb's tmpdir"))?;
        let log = dir.path().join("install.log");
        install_datadir(&placement, &install, &datadir, &tmpdir, &log).await?;

        let (port, process) = retry_on_exit(async || {
            let port = free_port()?;
            let mut args: Vec<OsString> = vec![
                "--no-defaults".into(),
                arg("--datadir=", &datadir),
                arg("--tmpdir=", &tmpdir),
                arg("--socket=", &socket),
                arg("--pid-file=", &dir.path().join("mariadbd.pid")),
                format!("--port={port}").into(),
                format!("--bind-address={}", placement.bind()).into(),
            ];
            args.extend(SERVER_FLAGS.iter().map(OsString::from));
            if binlog {
                // After `--skip-log-bin`: the last one wins.
                args.extend([
                    arg("--log-bin=", &dir.path().join("binlog")),
                    format!("--server-id={port}").into(),
                    "--log-slave-updates".into(),
                    "--binlog-format=ROW".into(),
                ]);
            }
            args.extend(run_as_root_flag());
            args.extend(tls.map(ServerTls::mariadb_flags).unwrap_or_default());
            let (program, args) = match clock {
                Some(clock) => clock.wrap(&server, args),
                None => (server.clone(), args),
            };
            let process =
                ServerProcess::start_at(&placement, "mariadbd", &program, args, dir.path())?;
            let addr = SocketAddr::new(placement.host(), port);
            process.wait_ready(READY_TIMEOUT, || greets(addr)).await?;
            Ok((port, process))
        })
        .await?;
        let engine = MariaDb { socket, client };
        let server = Server::new(
            placement.host(),
            (port, None),
            process,
            dir,
            Sql::new("mysql", engine, clock),
        );
        let require = match tls {
            Some(tls) if tls.require_client_cert => " REQUIRE X509",
            _ => "",
        };
        server
            .exec_root(&format!(
                "CREATE DATABASE IF NOT EXISTS `{DATABASE}`;\n\
                 CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{}'{require};\n\
                 GRANT ALL ON `{DATABASE}`.* TO '{USER}'@'%';\n",
                server.password()
            ))
            .await?;
        Ok(server)
    }

    /// The server's Unix socket, where `root` logs in without a password.
    pub fn socket_path(&self) -> &Path {
        &self.kind.engine.socket
    }

    /// Shuts the server down cleanly (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }

    /// Stops the server if it runs, then starts it on the same port with the same
    /// datadir (tables, rows and users survive) and waits until it accepts clients.
    pub async fn restart(&self) -> Result<(), ServerError> {
        let addr = self.addr();
        self.process
            .restart(STOP_GRACE, READY_TIMEOUT, || greets(addr))
            .await
    }

    /// Runs `sql` as `root` through the `mariadb` client over the Unix socket and
    /// returns the result rows, tab-separated, without a header. For test control:
    /// `KILL <id>`, `SHOW GLOBAL STATUS`, reading rows behind an adapter's back.
    pub async fn exec_root(&self, sql: &str) -> Result<String, ServerError> {
        let mut command = match self.process.container() {
            // The socket is in the mounted scratch dir; the image's client reads it.
            Some(container) => super::docker::exec_command(container, "mariadb"),
            None => tokio::process::Command::new(&self.kind.engine.client),
        };
        command
            .arg("--no-defaults")
            .arg("--protocol=socket")
            .arg(arg("--socket=", self.socket_path()))
            .args(["--user=root", "--batch", "--skip-column-names"]);
        run_sql(&mut command, sql, "mariadb (as root)").await
    }
}

async fn install_datadir(
    placement: &Placement,
    install: &Path,
    datadir: &Path,
    tmpdir: &Path,
    log: &Path,
) -> Result<(), ServerError> {
    let mut args: Vec<OsString> = vec![
        "--no-defaults".into(),
        arg("--datadir=", datadir),
        arg("--tmpdir=", tmpdir),
        "--auth-root-authentication-method=normal".into(),
        "--skip-test-db".into(),
    ];
    args.extend(SERVER_FLAGS.iter().map(OsString::from));
    args.extend(run_as_root_flag());
    let scratch = datadir.parent().unwrap_or(datadir);
    let tmp = tmpdir.as_os_str().to_owned();
    let env = [("TMPDIR", &tmp)];
    let name = "mariadb-install-db";
    run_setup(placement, name, install, &args, &env, scratch, log).await
}

/// `mariadbd` refuses to run as root unless told to.
fn run_as_root_flag() -> Option<OsString> {
    nix::unistd::geteuid()
        .is_root()
        .then(|| OsString::from("--user=root"))
}

fn arg(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path);
    arg
}

/// Whether a MySQL-protocol greeting (protocol version 10) arrives from `addr`, or
/// the server's refusal of an unknown host (error 1130), which is what a fresh
/// server in a container says to the host before the test user exists.
async fn greets(addr: SocketAddr) -> bool {
    const HOST_NOT_ALLOWED: u16 = 1130;
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    // 3-byte length, sequence id, then the protocol version (or 0xFF and an error
    // code); a greeting is always longer than these 7 bytes.
    let mut header = [0u8; 7];
    if stream.read_exact(&mut header).await.is_err() {
        return false;
    }
    match header[4] {
        10 => true,
        0xFF => u16::from_le_bytes([header[5], header[6]]) == HOST_NOT_ALLOWED,
        _ => false,
    }
}
