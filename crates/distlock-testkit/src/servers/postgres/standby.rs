//! A hot standby of a launched PostgreSQL server, streaming its WAL
//! asynchronously (the default: no `synchronous_standby_names`), and its
//! promotion: what a failover does with Debian's packages alone
//! (`pg_basebackup -R`, then `pg_promote()`).

use super::commands::{Runner, SocketLogin, server_bin_dir};
use super::{Postgres, PostgresServer, SUPERUSER, serve};
use crate::servers::ServerError;
use crate::servers::placement::Placement;
use crate::servers::server::Server;
use crate::servers::sql::{Sql, run_setup};
use std::ffi::OsString;

impl PostgresServer {
    /// Like [`start`](Self::start), natively whatever the launcher, as a
    /// primary that [`start_standby`](Self::start_standby) can copy.
    pub async fn start_primary() -> Result<PostgresServer, ServerError> {
        Self::start_at(Placement::native(), None, None).await
    }

    /// Starts a hot standby of this server, natively: `pg_basebackup -R`
    /// over this server's socket as the superuser into a data dir of its own
    /// (which writes `standby.signal` and the `primary_conninfo` it streams
    /// from), then `postgres` on a free port. Its roles, password and data
    /// are this server's as of the copy, and follow it a little behind.
    pub async fn start_standby(&self) -> Result<PostgresServer, ServerError> {
        if self.process.container().is_some() {
            return Err(ServerError::Protocol(
                "a PostgreSQL standby is launched natively only: start its primary with start_primary".into(),
            ));
        }
        let placement = Placement::native();
        let (bin, runner) = (server_bin_dir()?, Runner::current()?);
        let dir = tempfile::Builder::new()
            .prefix("distlock-postgres-standby-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for a postgres standby"))?;
        runner.own(dir.path())?;
        let basebackup = bin.join("pg_basebackup");
        let mut args = runner.prefix(&basebackup);
        args.extend([
            "-h".into(),
            self.socket_dir().as_os_str().to_owned(),
            OsString::from("-p"),
            self.port().to_string().into(),
            "-U".into(),
            SUPERUSER.into(),
            "-D".into(),
            dir.path().join("data").into_os_string(),
            // A checkpoint at once, not spread over minutes; never a
            // password prompt; the WAL written meanwhile streamed; the
            // standby settings written.
            "-c".into(),
            "fast".into(),
            "-w".into(),
            "-X".into(),
            "stream".into(),
            "-R".into(),
            "--no-sync".into(),
        ]);
        let (program, log) = (
            runner.program(&basebackup),
            dir.path().join("basebackup.log"),
        );
        run_setup(
            &placement,
            "pg_basebackup",
            &program,
            &args,
            &[],
            dir.path(),
            &log,
        )
        .await?;
        let (port, process) = serve(&placement, &bin, &runner, dir.path(), &[], None).await?;
        let engine = Postgres {
            login: SocketLogin::new(&bin, dir.path(), port),
        };
        let mut kind = Sql::new("postgres", engine, None);
        kind.set_password(self.password());
        Ok(Server::new(
            placement.host(),
            (port, None),
            process,
            dir,
            kind,
        ))
    }

    /// Promotes this standby to a primary (`SELECT pg_promote()`), returning
    /// once it accepts writes. What it had not received from its old primary
    /// is lost.
    pub async fn promote(&self) -> Result<(), ServerError> {
        let promoted = self
            .exec_as("postgres", "SELECT pg_promote(true, 30);")
            .await?;
        if promoted.trim() == "t" {
            Ok(())
        } else {
            Err(ServerError::Protocol(format!(
                "pg_promote() answered {promoted:?}, not t: the standby was not promoted within 30 s"
            )))
        }
    }
}
