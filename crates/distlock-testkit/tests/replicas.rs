//! The launchers of a primary with an asynchronous replica (the failover
//! trials' `<backend>_replica::chaos` and `::lagging`): the replica follows
//! the primary, also through a relay, and once the primary is killed and the
//! replica promoted, it takes writes; what the relay held back is lost.

// Helpers fail the test by panicking, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use distlock_testkit::fault::{Fault, FaultControl};
use distlock_testkit::proxy::FaultProxy;
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
    let standby = primary.start_standby(primary.addr()).await.unwrap();
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
    let replica = primary.start_replica(primary.addr()).await.unwrap();
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
    let next = replica.start_replica(replica.addr()).await.unwrap();
    eventually_reads("the new replica's copy", "2", || async {
        next.exec_root(count).await.unwrap_or_default()
    })
    .await;
}

#[tokio::test]
async fn a_write_the_replication_link_held_back_is_lost_when_the_primary_dies() {
    let primary = MariaDbServer::start_primary().await.unwrap();
    let link = FaultProxy::start_on(primary.test_host(), primary.addr())
        .await
        .unwrap();
    let replica = primary.start_replica(link.addr()).await.unwrap();
    let count = "SELECT COUNT(*) FROM distlock.t;";
    primary
        .exec_root("CREATE TABLE distlock.t (v INT); INSERT INTO distlock.t VALUES (1);")
        .await
        .unwrap();
    eventually_reads("the replica's copy", "1", || async {
        replica.exec_root(count).await.unwrap_or_default()
    })
    .await;
    // The link holds every byte back from now on; the write commits on the
    // primary, which dies before sending it on.
    link.set_fault(Fault::Blackhole).await;
    primary
        .exec_root("INSERT INTO distlock.t VALUES (2);")
        .await
        .unwrap();
    link.set_fault(Fault::Reset).await;
    primary.process().kill();
    replica.promote().await.unwrap();
    assert_eq!(replica.exec_root(count).await.unwrap().trim(), "1");
}

#[tokio::test]
async fn a_commit_the_streaming_link_held_back_is_lost_when_the_primary_dies() {
    let primary = PostgresServer::start_primary().await.unwrap();
    let link = FaultProxy::start_on(primary.test_host(), primary.addr())
        .await
        .unwrap();
    let standby = primary.start_standby(link.addr()).await.unwrap();
    let count = "SELECT COUNT(*) FROM t;";
    primary
        .exec_admin("CREATE TABLE t (v INT); INSERT INTO t VALUES (1);")
        .await
        .unwrap();
    eventually_reads("the standby's copy", "1", || async {
        standby.exec_admin(count).await.unwrap_or_default()
    })
    .await;
    link.set_fault(Fault::Blackhole).await;
    let written = primary
        .exec_admin("INSERT INTO t VALUES (2); SELECT pg_current_wal_lsn();")
        .await
        .unwrap();
    // The primary has sent the commit on: only the link keeps it from the
    // standby.
    let sent = format!(
        "SELECT sent_lsn >= '{}'::pg_lsn FROM pg_stat_replication;",
        written.trim()
    );
    eventually_reads("the primary's sending", "t", || async {
        primary.exec_admin(&sent).await.unwrap_or_default()
    })
    .await;
    link.set_fault(Fault::Reset).await;
    primary.process().kill();
    standby.promote().await.unwrap();
    assert_eq!(standby.exec_admin(count).await.unwrap().trim(), "1");
}
