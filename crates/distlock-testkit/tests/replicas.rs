//! The launchers of a primary with an asynchronous replica (the failover
//! trials' `<backend>_replica::chaos`): the replica follows the primary, and
//! once the primary is killed and the replica promoted, it takes writes.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::servers::{Launched, MariaDbServer, PostgresServer};
use std::time::Duration;
use tokio::time::Instant;

/// Long enough for any healthy answer on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `read` until it gives `want`, failing the test after `PATIENCE`.
async fn eventually_reads<F, Fut>(what: &str, want: &str, mut read: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = read().await;
        if got.trim() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_postgres_standby_follows_refuses_writes_and_takes_them_once_promoted() {
    let primary = PostgresServer::start_primary().await.unwrap();
    let standby = primary.start_standby().await.unwrap();
    assert_eq!(standby.password(), primary.password());
    primary
        .exec_admin("CREATE TABLE t (v INT); INSERT INTO t VALUES (1);")
        .await
        .unwrap();
    let count = "SELECT COUNT(*) FROM t;";
    eventually_reads("the standby's copy", "1", || async {
        standby.exec_admin(count).await.unwrap_or_default()
    })
    .await;
    let refused = standby.exec_admin("INSERT INTO t VALUES (2);").await;
    assert!(refused.is_err(), "a standby took a write: {refused:?}");
    primary.process().kill();
    standby.promote().await.unwrap();
    standby
        .exec_admin("INSERT INTO t VALUES (2);")
        .await
        .unwrap();
    assert_eq!(standby.exec_admin(count).await.unwrap().trim(), "2");
}

#[tokio::test]
async fn a_mariadb_replica_follows_and_takes_writes_once_promoted() {
    let primary = MariaDbServer::start_primary().await.unwrap();
    let replica = primary.start_replica().await.unwrap();
    assert_eq!(replica.password(), primary.password());
    primary
        .exec_root("CREATE TABLE distlock.t (v INT); INSERT INTO distlock.t VALUES (1);")
        .await
        .unwrap();
    let count = "SELECT COUNT(*) FROM distlock.t;";
    eventually_reads("the replica's copy", "1", || async {
        replica.exec_root(count).await.unwrap_or_default()
    })
    .await;
    primary.process().kill();
    replica.promote().await.unwrap();
    let running = "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING';";
    assert_eq!(replica.exec_root(running).await.unwrap().trim(), "OFF");
    replica
        .exec_root("INSERT INTO distlock.t VALUES (2);")
        .await
        .unwrap();
    assert_eq!(replica.exec_root(count).await.unwrap().trim(), "2");
    // A replica of the promoted server copies everything, from before too.
    let next = replica.start_replica().await.unwrap();
    eventually_reads("the new replica's copy", "2", || async {
        next.exec_root(count).await.unwrap_or_default()
    })
    .await;
}
