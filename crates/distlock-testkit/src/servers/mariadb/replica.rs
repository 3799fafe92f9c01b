//! A MariaDB primary writing a binary log and an asynchronous replica of it
//! (binlog replication, Debian's packages alone), and the replica's
//! promotion: what a failover does.

use super::{MariaDbServer, USER};
use crate::servers::{Placement, ServerError};
use std::time::Duration;

/// How long a new replica may take to start replicating.
const REPLICATING_TIMEOUT: Duration = Duration::from_secs(30);

impl MariaDbServer {
    /// Like [`start`](Self::start), natively whatever the launcher, writing a
    /// binary log (its server id its port) that
    /// [`start_replica`](Self::start_replica) follows; the test user may
    /// replicate.
    pub async fn start_primary() -> Result<MariaDbServer, ServerError> {
        let primary = Self::start_at(Placement::native(), None, None, true).await?;
        primary
            .exec_root(&format!("GRANT REPLICATION SLAVE ON *.* TO '{USER}'@'%';"))
            .await?;
        Ok(primary)
    }

    /// Starts an asynchronous replica of this server, natively: a new server
    /// with a binary log of its own (so that it can be a primary in turn),
    /// reading this one's from its start as the test user, whose password
    /// it takes. Returns once both replication threads run.
    pub async fn start_replica(&self) -> Result<MariaDbServer, ServerError> {
        if self.process.container().is_some() {
            return Err(ServerError::Protocol(
                "a MariaDB replica is launched natively only: start its primary with start_primary"
                    .into(),
            ));
        }
        let mut replica = Self::start_at(Placement::native(), None, None, true).await?;
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
                self.addr().ip(),
                self.port()
            ))
            .await?;
        replica.kind.set_password(self.password());
        let deadline = tokio::time::Instant::now() + REPLICATING_TIMEOUT;
        loop {
            let running = replica
                .exec_root("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING';")
                .await?;
            if running.trim() == "ON" {
                return Ok(replica);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServerError::Protocol(format!(
                    "the MariaDB replica was not replicating within {REPLICATING_TIMEOUT:?} (SLAVE_RUNNING {running:?}); its log:\n{}",
                    replica.process.log_tail(20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Promotes this replica to a primary: replication stopped and
    /// forgotten. What it had not received from its old primary is lost.
    pub async fn promote(&self) -> Result<(), ServerError> {
        self.exec_root("STOP SLAVE;\nRESET SLAVE ALL;\n").await?;
        Ok(())
    }
}
