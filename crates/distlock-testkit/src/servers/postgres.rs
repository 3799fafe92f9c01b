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

use super::clock::MovableClock;
use super::placement::place_under;
use super::process::ServerProcess;
use super::server::Server;
use super::sql::{DATABASE, Sql, USER, run_setup, run_sql};
use super::tls::ServerTls;
use super::{ServerError, free_port, retry_on_exit};
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod commands;
pub mod pgbouncer;
mod standby;

use commands::{Runner, SocketLogin, server_bin_dir};

/// initdb plus first start.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(20);
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
pub type PostgresServer = Server<Sql<Postgres>>;

/// What a PostgreSQL server adds to a SQL [`Server`]: how the superuser logs in
/// over the Unix socket.
#[derive(Debug)]
pub struct Postgres {
    login: SocketLogin,
}

impl PostgresServer {
    /// Creates a data dir, starts the server, and creates the role and database;
    /// returns once the server accepts logins.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_inner(None, None).await
    }

    /// Like [`start`](Self::start), with a wall clock the test moves (see
    /// [`MovableClock`]).
    pub async fn start_with_clock(clock: &MovableClock) -> Result<Self, ServerError> {
        Self::start_inner(None, Some(clock)).await
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
        Self::start_inner(Some(tls), None).await
    }

    async fn start_inner(
        tls: Option<&ServerTls>,
        clock: Option<&MovableClock>,
    ) -> Result<Self, ServerError> {
        Self::start_at(place_under("postgres", clock)?, tls, clock).await
    }

    async fn start_at(
        placement: super::Placement,
        tls: Option<&ServerTls>,
        clock: Option<&MovableClock>,
    ) -> Result<Self, ServerError> {
        let bin = bin_dir(&placement)?;
        let initdb = bin.join("initdb");
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
        let program = runner.program(&initdb);
        run_setup(&placement, "initdb", &program, &init, &[], dir.path(), &log).await?;
        if placement.is_container() {
            // Clients come from the host, through the network's gateway address.
            let hba = data.join("pg_hba.conf");
            let mut text =
                std::fs::read_to_string(&hba).map_err(ServerError::io("read pg_hba.conf"))?;
            // A standby copies it and streams from the primary that way too.
            text.push_str("host all all 0.0.0.0/0 md5\nhost replication all 0.0.0.0/0 md5\n");
            std::fs::write(&hba, text).map_err(ServerError::io("write pg_hba.conf"))?;
        }
        let tls_settings = match tls {
            Some(tls) => ssl_settings(tls, dir.path(), &runner)?,
            None => Vec::new(),
        };

        let (port, process) =
            serve(&placement, &bin, &runner, dir.path(), &tls_settings, clock).await?;
        let login = SocketLogin::new(&bin, dir.path(), port);
        let engine = Postgres { login };
        let server = Server::new(
            placement.host(),
            (port, None),
            process,
            dir,
            Sql::new("postgres", engine, clock),
        );
        server
            .exec_as(
                "postgres",
                &format!(
                    "CREATE ROLE {USER} LOGIN PASSWORD '{}';\nCREATE DATABASE {DATABASE} OWNER {USER};\n",
                    server.password()
                ),
            )
            .await?;
        server
            .exec_admin("CREATE EXTENSION IF NOT EXISTS pg_stat_statements;")
            .await?;
        Ok(server)
    }

    /// The directory of the server's Unix socket, where the superuser logs in
    /// without a password.
    pub fn socket_dir(&self) -> &Path {
        self.kind.engine.login.socket_dir()
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
        let _ = self.process.resume();
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
        let login = &self.kind.engine.login;
        self.process
            .wait_ready(READY_TIMEOUT, || login.ready(&self.process))
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
        let mut psql = self.kind.engine.login.tool(&self.process, "psql", database);
        psql.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]);
        run_sql(&mut psql, sql, "psql (as the superuser)").await
    }
}

/// Where the server's programs are: this machine's, or the image's.
fn bin_dir(placement: &super::Placement) -> Result<PathBuf, ServerError> {
    if placement.is_container() {
        Ok(PathBuf::from(IMAGE_BIN_DIR))
    } else {
        server_bin_dir()
    }
}

/// Starts `postgres` on the data dir `dir/data` and a free port, its socket
/// in `dir`, with `settings` beside the usual ones, under `clock` if given;
/// returns once it accepts logins, retrying on fresh ports if it exits.
async fn serve(
    placement: &super::Placement,
    bin: &Path,
    runner: &Runner,
    dir: &Path,
    settings: &[String],
    clock: Option<&MovableClock>,
) -> Result<(u16, ServerProcess), ServerError> {
    let postgres = bin.join("postgres");
    retry_on_exit(async || {
        let port = free_port()?;
        let mut args = runner.prefix(&postgres);
        args.extend(["-D".into(), dir.join("data").into_os_string()]);
        args.extend(["-p".into(), port.to_string().into()]);
        args.extend(["-k".into(), dir.as_os_str().to_owned()]);
        for setting in SERVER_SETTINGS
            .iter()
            .copied()
            .chain(settings.iter().map(String::as_str))
        {
            args.extend(["-c".into(), OsString::from(setting)]);
        }
        // The last setting wins: every interface in a container.
        args.extend([
            "-c".into(),
            format!("listen_addresses={}", placement.bind()).into(),
        ]);
        let program = runner.program(&postgres);
        let (program, args) = match clock {
            Some(clock) => clock.wrap(&program, args),
            None => (program, args),
        };
        let process = ServerProcess::start_at(placement, "postgres", &program, args, dir)?;
        let login = SocketLogin::new(bin, dir, port);
        process
            .wait_ready(READY_TIMEOUT, || login.ready(&process))
            .await?;
        Ok((port, process))
    })
    .await
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
