//! PgBouncer launcher: a `pgbouncer` child process on a free loopback port in
//! front of a launched PostgreSQL, in `pool_mode = transaction` (a server
//! connection is a client's only for one transaction) with the common
//! `ignore_startup_parameters = extra_float_digits`, so that the suite meets
//! the proxy most production PostgreSQL is reached through.
//!
//! The proxy logs in to PostgreSQL as the test role with its password (md5,
//! from its own `userlist.txt`), and clients log in to the proxy the same way.
//! Like PostgreSQL, PgBouncer refuses to run as root: under root it runs as
//! `nobody`. With `DISTLOCK_LAUNCHER=docker` it runs in a container of the
//! `distlock/postgres` image (which has Debian's `pgbouncer` too), in front of
//! the PostgreSQL container.

use super::commands::Runner;
use crate::servers::place;
use crate::servers::process::ServerProcess;
use crate::servers::server::Server;
use crate::servers::sql::{DATABASE, USER};
use crate::servers::{
    PostgresServer, READY_TIMEOUT, ServerError, find_binary, free_port, retry_on_exit, url_encode,
    write_private,
};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The Debian package of `pgbouncer`, for the install hint.
const PACKAGE: &str = "pgbouncer";
/// Where Debian's package (and so the `distlock/postgres` image) puts it.
const IMAGE_BINARY: &str = "/usr/sbin/pgbouncer";
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A `pgbouncer` in transaction pooling mode in front of its own
/// [`PostgresServer`]. Both processes are killed when this value is dropped.
pub type PgBouncerServer = Server<PgBouncer>;

/// What a PgBouncer [`Server`] adds: the PostgreSQL behind it.
#[derive(Debug)]
pub struct PgBouncer {
    postgres: PostgresServer,
}

/// The proxy's settings: transaction pooling, `extra_float_digits` (which
/// sqlx sends) ignored, and room for the suite's many clients.
fn config_text(
    bind: IpAddr,
    port: u16,
    postgres: &PostgresServer,
    dir: &std::path::Path,
) -> String {
    let server = postgres.addr();
    format!(
        "[databases]\n\
         {DATABASE} = host={} port={} dbname={DATABASE}\n\
         [pgbouncer]\n\
         listen_addr = {bind}\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = md5\n\
         auth_file = {}\n\
         pool_mode = transaction\n\
         ignore_startup_parameters = extra_float_digits\n\
         max_client_conn = 2000\n\
         default_pool_size = 200\n\
         server_login_retry = 1\n\
         log_connections = 0\n\
         log_disconnections = 0\n",
        server.ip(),
        server.port(),
        dir.join("userlist.txt").display(),
    )
}

impl PgBouncerServer {
    /// Starts a PostgreSQL server, then `pgbouncer` in front of it; returns
    /// once the proxy accepts connections.
    pub async fn start() -> Result<Self, ServerError> {
        let placement = place("postgres")?;
        let binary = match placement.is_container() {
            true => PathBuf::from(IMAGE_BINARY),
            false => find_binary("pgbouncer", PACKAGE)?,
        };
        let postgres = PostgresServer::start().await?;
        let runner = Runner::current()?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-pgbouncer-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for pgbouncer"))?;
        runner.own(dir.path())?;
        let users = dir.path().join("userlist.txt");
        write_private(&users, &format!("\"{USER}\" \"{}\"\n", postgres.password()))?;
        runner.own(&users)?;
        let config = dir.path().join("pgbouncer.ini");
        let (port, process) = retry_on_exit(async || {
            let port = free_port()?;
            let text = config_text(placement.bind(), port, &postgres, dir.path());
            write_private(&config, &text)?;
            runner.own(&config)?;
            let mut args = runner.prefix(&binary);
            args.push(config.clone().into_os_string());
            let program = runner.program(&binary);
            let process =
                ServerProcess::start_at(&placement, "pgbouncer", &program, args, dir.path())?;
            let addr = SocketAddr::new(placement.host(), port);
            let accepts = || async move { tokio::net::TcpStream::connect(addr).await.is_ok() };
            process.wait_ready(READY_TIMEOUT, accepts).await?;
            Ok((port, process))
        })
        .await?;
        let kind = PgBouncer { postgres };
        Ok(Server::new(
            placement.host(),
            (port, None),
            process,
            dir,
            kind,
        ))
    }

    /// `postgres://distlock:<password>@<host>:<port>/distlock` (host
    /// `127.0.0.1`, or the container's address): the test role's URL through
    /// the proxy (add `?pooler=transaction` for a
    /// distlock client that knows it).
    pub fn url(&self) -> String {
        let password = url_encode(self.kind.postgres.password());
        format!("postgres://{USER}:{password}@{}/{DATABASE}", self.addr())
    }

    /// The PostgreSQL server behind the proxy (its `url()` reaches it directly).
    pub fn postgres(&self) -> &PostgresServer {
        &self.kind.postgres
    }

    /// Restarts the PostgreSQL server behind the proxy (same port and data);
    /// the proxy stays up and opens new server connections.
    pub async fn restart(&self) -> Result<(), ServerError> {
        self.kind.postgres.restart().await
    }

    /// Stops the proxy (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }
}

#[async_trait::async_trait]
impl crate::servers::Launched for PgBouncerServer {
    async fn restart(&self) -> Result<(), ServerError> {
        PgBouncerServer::restart(self).await
    }

    fn log_tail(&self, lines: usize) -> String {
        format!(
            "pgbouncer:\n{}\npostgres:\n{}",
            self.process.log_tail(lines),
            self.kind.postgres.log_tail(lines)
        )
    }

    /// The PostgreSQL server's process: pausing or killing it is the outage
    /// the proxy's clients see.
    fn process(&self) -> &ServerProcess {
        &self.kind.postgres.process
    }
}
