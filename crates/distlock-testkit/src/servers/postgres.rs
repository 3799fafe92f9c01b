//! PostgreSQL launcher: `initdb` into a temp dir, then `postgres` on a free
//! loopback port with its Unix socket in the same dir, a `distlock` database and
//! a password-protected `distlock` role.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root every
//! server command runs as `nobody` (through `setpriv`, which execs: the process
//! the testkit signals is the server itself), with the temp dir owned by it.
//!
//! With `DISTLOCK_LAUNCHER=docker` the same command lines run in the
//! `distlock/postgres` image: `initdb` in a one-shot container, the server in its
//! own, and `psql`/`pg_isready` through `docker exec` over the socket in the
//! mounted temp dir; clients dial the container's address.

use super::process::ServerProcess;
use super::tls::ServerTls;
use super::{ServerError, free_port, place, random_password, retry_on_exit, url_encode};
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;

mod commands;

use commands::{Probe, Runner, run_to_end, server_bin_dir, tool};

/// initdb plus first start.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(20);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The database and role every test server gets.
const DATABASE: &str = "distlock";
const USER: &str = "distlock";
/// The superuser, which logs in over the Unix socket without a password.
const SUPERUSER: &str = "postgres";
/// Where Debian's package (and so the `distlock/postgres` image) keeps the binaries.
const IMAGE_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Server settings: loopback only, enough connections for many clients, and
/// `pg_stat_statements` for exact statement counts.
const SERVER_SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "max_connections=500",
    "shared_buffers=32MB",
    "shared_preload_libraries=pg_stat_statements",
    "log_min_messages=warning",
    "log_connections=off",
    "password_encryption=md5",
];

/// A `postgres` child process on a free loopback port, with its data dir and
/// socket in its own temp dir, a `distlock` database, and a `distlock` role with
/// a random password owning it.
///
/// The process is killed when this value is dropped.
pub struct PostgresServer {
    host: IpAddr,
    port: u16,
    password: String,
    dir_path: PathBuf,
    bin: PathBuf,
    process: ServerProcess,
    _dir: TempDir,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &USER)
            .field("password", &"<redacted>")
            .field("dir", &self.dir_path)
            .field("process", &self.process)
            .finish()
    }
}

impl PostgresServer {
    /// Creates a data dir, starts the server, and creates the role and database;
    /// returns once the server accepts logins.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_inner(None).await
    }

    /// The same, with `ssl=on` and `tls`'s server certificate on the client
    /// port: clients choose TLS (`sslmode`), plain connections still work.
    /// Client certificates are not asked for, so `tls` must not require them.
    pub async fn start_tls(tls: &ServerTls) -> Result<Self, ServerError> {
        if tls.require_client_cert {
            return Err(ServerError::Protocol(
                "the PostgreSQL launcher does not ask for client certificates; use ServerTls::generate".into(),
            ));
        }
        Self::start_inner(Some(tls)).await
    }

    async fn start_inner(tls: Option<&ServerTls>) -> Result<Self, ServerError> {
        let placement = place("postgres")?;
        let bin = if placement.is_container() {
            PathBuf::from(IMAGE_BIN_DIR)
        } else {
            server_bin_dir()?
        };
        let (initdb, postgres) = (bin.join("initdb"), bin.join("postgres"));
        let runner = Runner::current()?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-postgres-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for postgres"))?;
        runner.own(dir.path())?;
        let data = dir.path().join("data");
        let mut init = runner.prefix(&initdb);
        init.extend(["-D".into(), data.clone().into_os_string()]);
        init.extend(
            ["-U", SUPERUSER, "-E", "UTF8", "--locale=C", "--no-sync"]
                .into_iter()
                .map(OsString::from),
        );
        // md5, not SCRAM: a SCRAM login costs thousands of hash rounds on both
        // sides, and the suite opens hundreds of connections at once on a
        // shared machine (an unoptimised test build computes them slowly).
        init.extend(["--auth-local=trust".into(), "--auth-host=md5".into()]);
        let log = dir.path().join("initdb.log");
        run_to_end(&placement, &runner, &initdb, &init, dir.path(), &log).await?;
        if placement.is_container() {
            // Clients come from the host, through the network's gateway address.
            let hba = data.join("pg_hba.conf");
            let mut text =
                std::fs::read_to_string(&hba).map_err(ServerError::io("read pg_hba.conf"))?;
            text.push_str("host all all 0.0.0.0/0 md5\n");
            std::fs::write(&hba, text).map_err(ServerError::io("write pg_hba.conf"))?;
        }
        let tls_settings = match tls {
            Some(tls) => ssl_settings(tls, dir.path(), &runner)?,
            None => Vec::new(),
        };

        let (port, process) = retry_on_exit(async || {
            let port = free_port()?;
            let mut args = runner.prefix(&postgres);
            args.extend(["-D".into(), data.clone().into_os_string()]);
            args.extend(["-p".into(), port.to_string().into()]);
            args.extend(["-k".into(), dir.path().as_os_str().to_owned()]);
            for setting in SERVER_SETTINGS
                .iter()
                .copied()
                .chain(tls_settings.iter().map(String::as_str))
            {
                args.extend(["-c".into(), OsString::from(setting)]);
            }
            // The last setting wins: every interface in a container.
            args.extend([
                "-c".into(),
                format!("listen_addresses={}", placement.bind()).into(),
            ]);
            let program = runner.program(&postgres);
            let process =
                ServerProcess::start_at(&placement, "postgres", &program, args, dir.path())?;
            let probe = Probe::new(&bin, dir.path(), port);
            process
                .wait_ready(READY_TIMEOUT, || probe.ready(&process))
                .await?;
            Ok((port, process))
        })
        .await?;
        let server = PostgresServer {
            host: placement.host(),
            port,
            password: random_password(),
            dir_path: dir.path().to_owned(),
            bin,
            process,
            _dir: dir,
        };
        server
            .exec_as(
                "postgres",
                &format!(
                    "CREATE ROLE {USER} LOGIN PASSWORD '{}';\nCREATE DATABASE {DATABASE} OWNER {USER};\n",
                    server.password
                ),
            )
            .await?;
        server
            .exec_admin("CREATE EXTENSION IF NOT EXISTS pg_stat_statements;")
            .await?;
        Ok(server)
    }

    /// `postgres://distlock:<password>@<host>:<port>/distlock` (host `127.0.0.1`,
    /// or the container's address).
    pub fn url(&self) -> String {
        format!(
            "postgres://{USER}:{}@{}/{DATABASE}",
            url_encode(&self.password),
            self.addr()
        )
    }

    /// The address clients connect to: loopback, or the container's own.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The TCP port; it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The test role's name (`distlock`).
    pub fn user(&self) -> &str {
        USER
    }

    /// The test role's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The database the test role owns (`distlock`).
    pub fn database(&self) -> &str {
        DATABASE
    }

    /// The directory of the server's Unix socket, where the superuser logs in
    /// without a password.
    pub fn socket_dir(&self) -> &Path {
        &self.dir_path
    }

    /// Shuts the server down fast and cleanly (SIGINT: sessions are ended,
    /// everything is written), killing it if that takes too long. SIGTERM would
    /// wait for every client to leave.
    pub async fn stop(&self) {
        if let Some(container) = self.process.container() {
            return container.stop_with("SIGINT", STOP_GRACE).await;
        }
        if self.process.signal(Signal::SIGINT).is_err() {
            return;
        }
        let _ = self.process.signal(Signal::SIGCONT);
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while self.process.is_running() {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("postgres: no clean shutdown in time; killing");
                self.process.kill();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server if it runs, then starts it on the same port with the same
    /// data dir (tables, rows and roles survive) and waits until it accepts clients.
    pub async fn restart(&self) -> Result<(), ServerError> {
        self.stop().await;
        self.process.respawn()?;
        let probe = Probe::new(&self.bin, &self.dir_path, self.port);
        self.process
            .wait_ready(READY_TIMEOUT, || probe.ready(&self.process))
            .await
    }

    /// Runs `sql` as the superuser in the `distlock` database through `psql`
    /// over the Unix socket and returns the result rows, `|`-separated, without a
    /// header. For test control: `pg_terminate_backend`, statistics, reading
    /// rows behind an adapter's back.
    pub async fn exec_admin(&self, sql: &str) -> Result<String, ServerError> {
        self.exec_as(DATABASE, sql).await
    }

    async fn exec_as(&self, database: &str, sql: &str) -> Result<String, ServerError> {
        let mut child = tool(&self.bin, &self.process, "psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.dir_path)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
                "-d",
                database,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(ServerError::io("spawn psql"))?;
        // SQL goes through stdin so passwords in it stay out of process listings.
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(sql.as_bytes())
                .await
                .map_err(ServerError::io("send SQL to psql"))?;
        }
        let output = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| ServerError::Command {
                command: "psql (as the superuser)".into(),
                output: format!("no answer within {CLIENT_TIMEOUT:?}"),
            })?
            .map_err(ServerError::io("run psql"))?;
        if !output.status.success() {
            return Err(ServerError::Command {
                command: "psql (as the superuser)".into(),
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// `-c` settings for TLS. The server reads its key only if the key is private
/// to the user running it, so the certificate and key are copied into the
/// server's own directory and given to that user.
fn ssl_settings(tls: &ServerTls, dir: &Path, runner: &Runner) -> Result<Vec<String>, ServerError> {
    let certs = &tls.certificates;
    let mut settings = vec!["ssl=on".to_owned()];
    for (setting, from, file) in [
        ("ssl_cert_file", certs.server_cert(), "server.crt"),
        ("ssl_key_file", certs.server_key(), "server.key"),
    ] {
        let to = dir.join(file);
        let pem = std::fs::read_to_string(&from)
            .map_err(ServerError::io(format!("read {}", from.display())))?;
        super::write_private(&to, &pem)?;
        runner.own(&to)?;
        settings.push(format!("{setting}={}", to.display()));
    }
    Ok(settings)
}

/// The process operations (`pid`, `kill`, `pause`, `resume`, `log_tail`...) are
/// those of [`ServerProcess`]; `stop` and `restart` are the server's own.
impl std::ops::Deref for PostgresServer {
    type Target = ServerProcess;
    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}
