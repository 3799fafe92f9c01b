//! The backends the conformance suite runs against: memory always, the others
//! behind a Cargo feature each.

use distlock_core::BoxError;
use distlock_testkit::runner::BackendSpec;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;

pub mod chaos;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fences;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "nats")]
pub mod nats;
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
/// backend), its chaos trials, and how the fence target starts its server.
/// `tests/registry.rs` checks that every backend the facade registers has an
/// entry.
#[derive(Debug, Clone, Copy)]
pub struct TestBackend {
    /// The backend's registered name.
    pub name: &'static str,
    /// Its conformance suites.
    pub suites: fn() -> Vec<BackendSpec>,
    /// Its chaos trials.
    pub chaos: fn() -> Vec<chaos::Spec>,
    /// Starts a server (or the nodes) the fence target reaches by URL; `None`
    /// for the in-process backend.
    pub launch: Option<fn() -> Starting>,
    /// The locks the fence target's paused holder runs under, as (name, URL
    /// query appended to the launched URL); the first is also the fenced
    /// store's URL where the backend stores fenced data.
    pub fence_locks: &'static [(&'static str, &'static str)],
    /// Its clustered topologies for the `topologies` target, each a name and
    /// its cases (run as `<name>::<case>`); the etcd, ZooKeeper, MariaDB and
    /// Sentinel ones are listed in `topologies` itself.
    pub topologies: fn() -> Vec<topologies::Topology>,
}

/// A server starting.
pub type Starting = Pin<Box<dyn Future<Output = Result<Running, BoxError>> + Send>>;

/// A launched server's URL, and the server, stopped when this is dropped.
pub struct Running {
    /// The URL a client connects with.
    pub url: String,
    _servers: Box<dyn Any + Send + Sync>,
}

impl Running {
    /// `servers`, reached at `url`.
    pub fn new(url: String, servers: impl Any + Send + Sync) -> Self {
        Running {
            url,
            _servers: Box::new(servers),
        }
    }
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A paused-holder lock of an SQL backend: one per strategy, each on a table
/// of its own (strategies cannot share one).
#[cfg(any(feature = "mysql", feature = "postgres"))]
macro_rules! strategy {
    ($lock:literal, $strategy:literal) => {
        (
            $lock,
            concat!("?strategy=", $strategy, "&table=fenced_locks_", $strategy),
        )
    };
}

/// Every backend this build has, one line each.
pub fn backends() -> Vec<TestBackend> {
    vec![
        TestBackend {
            name: "memory",
            suites: || vec![memory::spec()],
            chaos: chaos::trials::memory,
            launch: None,
            fence_locks: &[],
            topologies: Vec::new,
        },
        #[cfg(feature = "zookeeper")]
        TestBackend {
            name: "zookeeper",
            suites: || vec![zookeeper::spec()],
            chaos: chaos::trials::zookeeper,
            launch: Some(|| Box::pin(zookeeper::launch_url())),
            fence_locks: &[("zookeeper", "")],
            topologies: Vec::new,
        },
        #[cfg(feature = "mysql")]
        TestBackend {
            name: "mysql",
            suites: sql::specs::<mysql::MySql>,
            chaos: chaos::trials::mysql,
            launch: Some(|| Box::pin(sql::launch_url::<mysql::MySql>())),
            fence_locks: &[
                strategy!("mysql", "version_cas"),
                strategy!("mysql_unique_insert", "unique_insert"),
                strategy!("mysql_for_update", "for_update"),
            ],
            topologies: Vec::new,
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
            launch: Some(|| Box::pin(redis::launch_url())),
            fence_locks: &[("redis", "")],
            topologies: Vec::new,
        },
        #[cfg(feature = "redlock")]
        TestBackend {
            name: "redlock",
            suites: || vec![redlock::spec()],
            chaos: chaos::trials::redlock,
            launch: Some(|| Box::pin(redlock::launch_url())),
            fence_locks: &[("redlock", "")],
            topologies: Vec::new,
        },
        #[cfg(feature = "etcd")]
        TestBackend {
            name: "etcd",
            suites: || vec![etcd::spec()],
            chaos: chaos::trials::etcd,
            launch: Some(|| Box::pin(etcd::launch_url())),
            fence_locks: &[("etcd", "")],
            topologies: Vec::new,
        },
        #[cfg(feature = "nats")]
        TestBackend {
            name: "nats",
            suites: || vec![nats::spec()],
            chaos: nats::chaos,
            launch: Some(|| Box::pin(nats::launch_url())),
            fence_locks: &[("nats", "")],
            topologies: nats::cluster::topologies,
        },
        #[cfg(feature = "postgres")]
        TestBackend {
            name: "postgres",
            suites: || {
                let mut suites = sql::specs::<postgres::Postgres>();
                suites.extend(sql::specs::<postgres::PgBouncer>());
                suites
            },
            chaos: chaos::trials::postgres,
            launch: Some(|| Box::pin(sql::launch_url::<postgres::Postgres>())),
            fence_locks: &[
                strategy!("postgres", "version_cas"),
                strategy!("postgres_advisory", "advisory"),
            ],
            topologies: Vec::new,
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
    #[doc = include_str!("../../docs/upgrading.md")]
    struct Upgrading;
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
    #[doc = include_str!("../../docs/backends/nats.md")]
    struct Nats;
    #[doc = include_str!("../../docs/semaphores.md")]
    struct Semaphores;
    #[doc = include_str!("../../docs/election.md")]
    struct Election;
    #[doc = include_str!("../../docs/rwlock.md")]
    struct RwLock;
}
