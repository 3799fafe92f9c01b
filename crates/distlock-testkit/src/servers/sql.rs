//! What the MariaDB and PostgreSQL launchers share: a `distlock` database owned
//! by a `distlock` user with a random password, the URL naming them, the one-shot
//! setup program (`mariadb-install-db`, `initdb`), and SQL through a client tool.

use super::clock::MovableClock;
use super::server::Server;
use super::{Placement, ServerError, random_password, url_encode};
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// The database and user every SQL test server gets.
pub(super) const DATABASE: &str = "distlock";
pub(super) const USER: &str = "distlock";
/// The longest a one-shot setup program may take; slow disks make it the long part.
pub(super) const SETUP_TIMEOUT: Duration = Duration::from_secs(90);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The kind of a SQL [`Server`]: the test user's password and engine `E`'s own
/// parts ([`super::mariadb::MariaDb`], [`super::postgres::Postgres`]).
pub struct Sql<E> {
    scheme: &'static str,
    password: String,
    pub(super) engine: E,
    clock: Option<MovableClock>,
}

impl<E> Sql<E> {
    /// A fresh random password for URLs of `scheme` (`mysql`, `postgres`),
    /// for a server running under `clock` if given.
    pub(super) fn new(scheme: &'static str, engine: E, clock: Option<&MovableClock>) -> Self {
        Sql {
            scheme,
            password: random_password(),
            engine,
            clock: clock.cloned(),
        }
    }

    /// Takes `password` as the test user's: a replica's test user is its
    /// primary's, copied with the data.
    pub(super) fn set_password(&mut self, password: &str) {
        password.clone_into(&mut self.password);
    }
}

impl<E: std::fmt::Debug> std::fmt::Debug for Sql<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sql")
            .field("user", &USER)
            .field("password", &"<redacted>")
            .field("engine", &self.engine)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<E> Server<Sql<E>> {
    /// The wall clock it was started with (`start_with_clock`), if any.
    pub fn clock(&self) -> Option<&MovableClock> {
        self.kind.clock.as_ref()
    }

    /// `<scheme>://distlock:<password>@<host>:<port>/distlock` (host `127.0.0.1`,
    /// or the container's address), the scheme being `mysql` or `postgres`.
    pub fn url(&self) -> String {
        format!(
            "{}://{USER}:{}@{}/{DATABASE}",
            self.kind.scheme,
            url_encode(&self.kind.password),
            self.addr()
        )
    }

    /// The test user's (PostgreSQL: role's) name (`distlock`).
    pub fn user(&self) -> &str {
        USER
    }

    /// The test user's password.
    pub fn password(&self) -> &str {
        &self.kind.password
    }

    /// The database the test user owns (`distlock`).
    pub fn database(&self) -> &str {
        DATABASE
    }
}

/// Runs `client`, a SQL client tool logged in as the superuser, with `sql` on
/// its stdin and returns its stdout; `who` names it in errors.
pub(super) async fn run_sql(
    client: &mut tokio::process::Command,
    sql: &str,
    who: &str,
) -> Result<String, ServerError> {
    let mut child = client
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(ServerError::io(format!("spawn {who}")))?;
    // SQL goes through stdin so passwords in it stay out of process listings.
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(sql.as_bytes())
            .await
            .map_err(ServerError::io(format!("send SQL to {who}")))?;
    }
    let output = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| ServerError::Command {
            command: who.into(),
            output: format!("no answer within {CLIENT_TIMEOUT:?}"),
        })?
        .map_err(ServerError::io(format!("run {who}")))?;
    if !output.status.success() {
        return Err(ServerError::Command {
            command: who.into(),
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs the setup program `name` as `program args` (with `env`) to its end,
/// natively or in a one-shot container of the image with `scratch` mounted,
/// keeping its output in `log`; a failure carries the output's tail.
pub(super) async fn run_setup(
    placement: &Placement,
    name: &str,
    program: &Path,
    args: &[OsString],
    env: &[(&str, &OsString)],
    scratch: &Path,
    log: &Path,
) -> Result<(), ServerError> {
    let run = async {
        match placement.docker() {
            Some((run, image)) => {
                super::docker::run_once(run, image, program, args, scratch, env).await
            }
            None => tokio::process::Command::new(program)
                .args(args)
                .envs(env.iter().copied())
                .kill_on_drop(true)
                .output()
                .await
                .map_err(ServerError::io(format!("run {name}"))),
        }
    };
    let output = tokio::time::timeout(SETUP_TIMEOUT, run)
        .await
        .map_err(|_| ServerError::Command {
            command: name.into(),
            output: format!("no result within {SETUP_TIMEOUT:?}"),
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
        command: name.into(),
        output: tail.join("\n"),
    })
}
