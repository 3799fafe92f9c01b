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

/// Every enabled backend.
pub fn specs() -> Vec<BackendSpec> {
    #[allow(unused_mut)]
    let mut specs = vec![memory::spec()];
    #[cfg(feature = "zookeeper")]
    specs.push(zookeeper::spec());
    #[cfg(feature = "mysql")]
    specs.extend(sql::specs::<mysql::MySql>());
    #[cfg(feature = "redis")]
    specs.push(redis::spec());
    #[cfg(feature = "redis")]
    specs.push(redis_sentinel::spec());
    #[cfg(feature = "redis")]
    specs.push(redis_fair::spec());
    #[cfg(feature = "redis")]
    specs.push(redis_cluster::spec());
    #[cfg(feature = "redis")]
    specs.push(redis_cluster::fair_spec());
    #[cfg(feature = "redlock")]
    specs.push(redlock::spec());
    #[cfg(feature = "etcd")]
    specs.push(etcd::spec());
    #[cfg(feature = "postgres")]
    specs.extend(sql::specs::<postgres::Postgres>());
    specs
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
