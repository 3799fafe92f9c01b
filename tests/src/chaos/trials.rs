//! Each backend's chaos trials: which harness, which faults, and which
//! properties are required rather than measured (Redis's are in `restart.rs`).
//! `crate::backends` lists them beside each backend's conformance suites.

#[cfg(any(
    feature = "redlock",
    feature = "etcd",
    feature = "zookeeper",
    feature = "mysql",
    feature = "postgres"
))]
use super::ALL;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use super::CLUSTER;
use super::{MEMORY, Spec};
use distlock_testkit::chaos::Requirement;
use std::sync::Arc;

/// `memory::chaos`: the simulated proxy's faults only.
pub fn memory() -> Vec<Spec> {
    vec![Spec {
        trial: "memory::chaos",
        backend: "memory",
        start: || {
            Box::pin(async { Ok(Arc::new(distlock_testkit::memory::MemoryHarness::new()) as _) })
        },
        faults: MEMORY,
        exclusion: Requirement::Required,
    }]
}

/// `redlock::chaos`, and `redlock::clock_jump`: three nodes whose clocks
/// jump forward, one or two at a time (two of three are a majority: the
/// two-holders scenario of Kleppmann's critique).
#[cfg(feature = "redlock")]
pub fn redlock() -> Vec<Spec> {
    use crate::redlock::RedlockHarness;
    vec![
        Spec {
            trial: "redlock::chaos",
            backend: "redlock",
            start: || Box::pin(async { Ok(Arc::new(RedlockHarness::launch().await?) as _) }),
            faults: ALL,
            // Timing assumptions: a node that restarts empty can vote for a second holder.
            exclusion: Requirement::Measured,
        },
        Spec {
            trial: "redlock::clock_jump",
            backend: "redlock",
            start: || {
                Box::pin(async { Ok(Arc::new(RedlockHarness::launch_with_clocks(3).await?) as _) })
            },
            // The jumps alone, so that they explain whatever the history shows.
            faults: &[distlock_testkit::chaos::FaultKind::ClockJump],
            // Timing assumptions again: a node whose clock jumps drops keys early.
            exclusion: Requirement::Measured,
        },
        super::clock::redlock(),
    ]
}

/// `etcd::chaos`, and `etcd_cluster::chaos` on 3 members: a quorum's
/// decisions, so no overlap under any partition either.
#[cfg(feature = "etcd")]
pub fn etcd() -> Vec<Spec> {
    use super::cluster::ClusterHarness;
    use distlock_testkit::servers::EtcdCluster;
    vec![
        Spec {
            trial: "etcd::chaos",
            backend: "etcd",
            start: || {
                Box::pin(async { Ok(Arc::new(crate::etcd::EtcdHarness::launch().await?) as _) })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "etcd_cluster::chaos",
            backend: "etcd",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(ClusterHarness::<EtcdCluster>::launch().await?) as _)
                })
            },
            faults: CLUSTER,
            exclusion: Requirement::Required,
        },
    ]
}

/// `zookeeper::chaos`, and `zk_ensemble::chaos` on 3 servers.
#[cfg(feature = "zookeeper")]
pub fn zookeeper() -> Vec<Spec> {
    use super::cluster::ClusterHarness;
    use distlock_testkit::servers::ZooKeeperEnsemble;
    vec![
        Spec {
            trial: "zookeeper::chaos",
            backend: "zookeeper",
            start: || {
                Box::pin(async { Ok(Arc::new(crate::zookeeper::ZkHarness::launch().await?) as _) })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "zk_ensemble::chaos",
            backend: "zookeeper",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(ClusterHarness::<ZooKeeperEnsemble>::launch().await?) as _)
                })
            },
            faults: CLUSTER,
            exclusion: Requirement::Required,
        },
    ]
}

/// `mysql::chaos` (version_cas) and `mysql_for_update::chaos`.
#[cfg(feature = "mysql")]
pub fn mysql() -> Vec<Spec> {
    use crate::mysql::MySql;
    use crate::sql::SqlHarness;
    use distlock_mysql::Strategy;
    vec![
        Spec {
            trial: "mysql::chaos",
            backend: "mysql",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(SqlHarness::<MySql>::launch(Strategy::VersionCas).await?) as _)
                })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "mysql_for_update::chaos",
            backend: "mysql_for_update",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(SqlHarness::<MySql>::launch(Strategy::ForUpdate).await?) as _)
                })
            },
            faults: ALL,
            // The row lock lives in the holder's connection: a reset connection
            // or a killed server frees it at once, and the holder learns at its
            // next keepalive. Measured (`docs/chaos.md`, "What the chaos run found").
            exclusion: Requirement::Measured,
        },
        super::clock::mysql(),
        super::replica::mysql(false),
        super::replica::mysql(true),
    ]
}

/// `postgres::chaos` (version_cas) and `postgres_advisory::chaos`.
#[cfg(feature = "postgres")]
pub fn postgres() -> Vec<Spec> {
    use crate::postgres::Postgres;
    use crate::sql::SqlHarness;
    use distlock_postgres::Strategy;
    vec![
        Spec {
            trial: "postgres::chaos",
            backend: "postgres",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(SqlHarness::<Postgres>::launch(Strategy::VersionCas).await?) as _)
                })
            },
            faults: ALL,
            exclusion: Requirement::Required,
        },
        Spec {
            trial: "postgres_advisory::chaos",
            backend: "postgres_advisory",
            start: || {
                Box::pin(async {
                    Ok(Arc::new(SqlHarness::<Postgres>::launch(Strategy::Advisory).await?) as _)
                })
            },
            faults: ALL,
            // The lock lives in the holder's session, as mysql_for_update's: a
            // reset connection or a killed server frees it at once, and the
            // holder learns at its next keepalive. Measured, not required.
            exclusion: Requirement::Measured,
        },
        super::clock::postgres(),
        super::replica::postgres(false),
        super::replica::postgres(true),
    ]
}
