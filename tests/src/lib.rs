//! The backends the conformance suite runs against: memory always, the others
//! behind a Cargo feature each.

use distlock_testkit::runner::BackendSpec;

pub mod chaos;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fences;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "redis", feature = "redlock"))]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_fair;
#[cfg(feature = "redis")]
pub mod redis_sentinel;
#[cfg(feature = "redlock")]
pub mod redlock;
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub mod sql;
pub mod topologies;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

/// What the test targets know of one registered backend: its conformance
/// suites (one per strategy or deployment shape, the first named like the
/// backend) and its chaos trials. `tests/registry.rs` checks that every
/// backend the facade registers has an entry.
#[derive(Debug, Clone, Copy)]
pub struct TestBackend {
    /// The backend's registered name.
    pub name: &'static str,
    /// Its conformance suites.
    pub suites: fn() -> Vec<BackendSpec>,
    /// Its chaos trials.
    pub chaos: fn() -> Vec<chaos::Spec>,
}

/// Every backend this build has, one line each.
pub fn backends() -> Vec<TestBackend> {
    vec![
        TestBackend {
            name: "memory",
            suites: || vec![memory::spec()],
            chaos: chaos::trials::memory,
        },
        #[cfg(feature = "zookeeper")]
        TestBackend {
            name: "zookeeper",
            suites: || vec![zookeeper::spec()],
            chaos: chaos::trials::zookeeper,
        },
        #[cfg(feature = "mysql")]
        TestBackend {
            name: "mysql",
            suites: sql::specs::<mysql::MySql>,
            chaos: chaos::trials::mysql,
        },
        #[cfg(feature = "redis")]
        TestBackend {
            name: "redis",
            suites: || {
                vec![
                    redis::spec(),
                    redis_sentinel::spec(),
                    redis_fair::spec(),
                    redis_cluster::spec(),
                    redis_cluster::fair_spec(),
                ]
            },
            chaos: chaos::restart::redis_specs,
        },
        #[cfg(feature = "redlock")]
        TestBackend {
            name: "redlock",
            suites: || vec![redlock::spec()],
            chaos: chaos::trials::redlock,
        },
        #[cfg(feature = "etcd")]
        TestBackend {
            name: "etcd",
            suites: || vec![etcd::spec()],
            chaos: chaos::trials::etcd,
        },
        #[cfg(feature = "postgres")]
        TestBackend {
            name: "postgres",
            suites: sql::specs::<postgres::Postgres>,
            chaos: chaos::trials::postgres,
        },
    ]
}

/// Every conformance suite of every backend this build has.
pub fn specs() -> Vec<BackendSpec> {
    backends()
        .into_iter()
        .flat_map(|backend| (backend.suites)())
        .collect()
}

/// The README and every page of `docs/`, compiled (and where they need no
/// server, run) as doctests against the `distlock` facade, so the code users
/// copy keeps working. They live here, in the unpublished test crate, because
/// the pages are in no published package.
#[cfg(all(doctest, feature = "full"))]
mod documentation {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/index.md")]
    struct Guide;
    #[doc = include_str!("../../docs/choosing-a-backend.md")]
    struct ChoosingABackend;
    #[doc = include_str!("../../docs/fencing.md")]
    struct Fencing;
    #[doc = include_str!("../../docs/operations.md")]
    struct Operations;
    #[doc = include_str!("../../docs/backends/redis.md")]
    struct Redis;
    #[doc = include_str!("../../docs/backends/redlock.md")]
    struct Redlock;
    #[doc = include_str!("../../docs/backends/etcd.md")]
    struct Etcd;
    #[doc = include_str!("../../docs/backends/zookeeper.md")]
    struct ZooKeeper;
    #[doc = include_str!("../../docs/backends/mysql.md")]
    struct MySql;
    #[doc = include_str!("../../docs/backends/postgres.md")]
    struct Postgres;
    #[doc = include_str!("../../docs/semaphores.md")]
    struct Semaphores;
    #[doc = include_str!("../../docs/election.md")]
    struct Election;
    #[doc = include_str!("../../docs/rwlock.md")]
    struct RwLock;
}
