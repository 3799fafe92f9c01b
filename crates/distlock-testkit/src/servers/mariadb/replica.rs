//! A MariaDB primary writing a binary log and an asynchronous replica of it
//! (binlog replication, Debian's packages alone), and the replica's
//! promotion: what a failover does.

use super::{MariaDbServer, USER};
use crate::servers::{ServerError, place};
use std::net::SocketAddr;
use std::time::Duration;

/// How long a new replica may take to start replicating.
const REPLICATING_TIMEOUT: Duration = Duration::from_secs(30);

impl MariaDbServer {
    /// Like [`start`](Self::start), writing a binary log (its server id its
    /// port) that [`start_replica`](Self::start_replica) follows; the test
    /// user may replicate.
    pub async fn start_primary() -> Result<MariaDbServer, ServerError> {
        let primary = Self::start_at(place("mariadb")?, None, None, true).await?;
        primary
            .exec_root(&format!("GRANT REPLICATION SLAVE ON *.* TO '{USER}'@'%';"))
            .await?;
        Ok(primary)
    }

    /// Starts an asynchronous replica of this server, which it reaches at
    /// `via`: its own address, or a relay to it (a fault proxy that makes
    /// the replica lag). The replica is a new server with a binary log of its
    /// own (so that it can be a primary in turn), reading this one's from
    /// its start as the test user, whose password it takes. Returns once it
    /// has applied all this server had written.
    pub async fn start_replica(&self, via: SocketAddr) -> Result<MariaDbServer, ServerError> {
        let mut replica = Self::start_at(place("mariadb")?, None, None, true).await?;
        // Its own setup made the test user with a password of its own; the
        // primary's `CREATE USER IF NOT EXISTS` will not change it.
        let password = self.password().replace('\'', "''");
        replica
            .exec_root(&format!(
                "SET sql_log_bin = 0;\n\
                 ALTER USER '{USER}'@'%' IDENTIFIED BY '{password}';\n\
                 SET sql_log_bin = 1;\n\
                 CHANGE MASTER TO MASTER_HOST = '{}', MASTER_PORT = {}, MASTER_USER = '{USER}',\n\
                   MASTER_PASSWORD = '{password}', MASTER_LOG_FILE = 'binlog.000001',\n\
                   MASTER_LOG_POS = 4, MASTER_CONNECT_RETRY = 1;\n\
                 START SLAVE;\n",
                via.ip(),
                via.port()
            ))
            .await?;
        replica.kind.set_password(self.password());
        let deadline = tokio::time::Instant::now() + REPLICATING_TIMEOUT;
        loop {
            let running = replica
                .exec_root("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING';")
                .await?;
            if running.trim() == "ON" {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServerError::Protocol(format!(
                    "the MariaDB replica was not replicating within {REPLICATING_TIMEOUT:?} (SLAVE_RUNNING {running:?}); its log:\n{}",
                    replica.process.log_tail(20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Running is not caught up: it reads this server's binary log from
        // its start, and a replica promoted before it has applied it would
        // lose more than its lag.
        let status = self.exec_root("SHOW MASTER STATUS;").await?;
        let mut fields = status.split('\t');
        let (Some(file), Some(position)) = (fields.next(), fields.next()) else {
            return Err(ServerError::Protocol(format!(
                "SHOW MASTER STATUS gave no binary log position: {status:?}"
            )));
        };
        let waited = replica
            .exec_root(&format!(
                "SELECT MASTER_POS_WAIT('{}', {}, {});",
                file.trim(),
                position.trim(),
                REPLICATING_TIMEOUT.as_secs()
            ))
            .await?;
        match waited.trim().parse::<i64>() {
            Ok(events) if events >= 0 => Ok(replica),
            _ => Err(ServerError::Protocol(format!(
                "the MariaDB replica had not applied {file}:{position} within {REPLICATING_TIMEOUT:?} (MASTER_POS_WAIT gave {waited:?}); its log:\n{}",
                replica.process.log_tail(20)
            ))),
        }
    }

    /// Promotes this replica to a primary: replication stopped and
    /// forgotten. What it had not received from its old primary is lost.
    pub async fn promote(&self) -> Result<(), ServerError> {
        self.exec_root("STOP SLAVE;\nRESET SLAVE ALL;\n").await?;
        Ok(())
    }
}
