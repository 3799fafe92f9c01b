//! A hot standby of a launched PostgreSQL server, streaming its WAL
//! asynchronously (the default: no `synchronous_standby_names`), and its
//! promotion: what a failover does with Debian's packages alone
//! (`pg_basebackup -R`, then `pg_promote()`).

use super::commands::{Runner, SocketLogin};
use super::{Postgres, PostgresServer, USER, bin_dir, serve};
use crate::servers::server::Server;
use crate::servers::sql::{Sql, run_setup};
use crate::servers::{ServerError, place, write_private};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a new standby may take to catch up with its primary.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);

impl PostgresServer {
    /// Like [`start`](Self::start), as a primary that
    /// [`start_standby`](Self::start_standby) can copy: the test user may
    /// replicate.
    pub async fn start_primary() -> Result<PostgresServer, ServerError> {
        let primary = Self::start_at(place("postgres")?, None, None).await?;
        primary
            .exec_as("postgres", &format!("ALTER ROLE {USER} REPLICATION;"))
            .await?;
        Ok(primary)
    }

    /// Starts a hot standby of this server, which it reaches at `via`: its
    /// own address, or a relay to it (a fault proxy that makes the standby
    /// lag). `pg_basebackup -R` copies this server as the test user over
    /// TCP into a data dir of its own (and writes `standby.signal` and the
    /// `primary_conninfo` it streams from, through `via` too), then
    /// `postgres` starts on a free port. Its roles, password and data are
    /// this server's as of the copy, and follow it a little behind; returns
    /// once it has caught up with this server. The
    /// password is in a password file only the server's user reads, never
    /// on a command line or in an environment.
    pub async fn start_standby(&self, via: SocketAddr) -> Result<PostgresServer, ServerError> {
        let placement = place("postgres")?;
        let (bin, runner) = (bin_dir(&placement)?, Runner::current()?);
        let dir = tempfile::Builder::new()
            .prefix("distlock-postgres-standby-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for a postgres standby"))?;
        runner.own(dir.path())?;
        let passfile = dir.path().join("pgpass");
        write_private(&passfile, &format!("*:*:*:{USER}:{}\n", self.password()))?;
        runner.own(&passfile)?;
        let basebackup = bin.join("pg_basebackup");
        let mut args = runner.prefix(&basebackup);
        args.extend([
            "-d".into(),
            format!(
                "host={} port={} user={USER} passfile={}",
                via.ip(),
                via.port(),
                passfile.display()
            )
            .into(),
            "-D".into(),
            dir.path().join("data").into_os_string(),
            // A checkpoint at once, not spread over minutes; never a
            // password prompt; the WAL written meanwhile streamed; the
            // standby settings written.
            OsString::from("-c"),
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
        let standby = Server::new(placement.host(), (port, None), process, dir, kind);
        // Accepting logins is not following yet: it has caught up once the
        // WAL written on this server since the copy is replayed there, and a
        // standby promoted before that would lose all of it, not only its lag.
        let written = self
            .exec_as("postgres", "SELECT pg_current_wal_lsn();")
            .await?;
        let caught_up = format!(
            "SELECT pg_last_wal_replay_lsn() >= '{}'::pg_lsn;",
            written.trim()
        );
        let deadline = tokio::time::Instant::now() + CATCH_UP_TIMEOUT;
        loop {
            let status = standby.exec_as("postgres", &caught_up).await?;
            if status.trim() == "t" {
                return Ok(standby);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServerError::Protocol(format!(
                    "the PostgreSQL standby had not replayed {} within {CATCH_UP_TIMEOUT:?} ({status:?}); its log:\n{}",
                    written.trim(),
                    standby.process.log_tail(20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
