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
#[cfg(any(feature = "redis", feature = "redlock"))]
pub mod redis;
#[cfg(feature = "redlock")]
pub mod redlock;
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
    specs.extend(mysql::specs());
    #[cfg(feature = "redis")]
    specs.push(redis::spec());
    #[cfg(feature = "redlock")]
    specs.push(redlock::spec());
    #[cfg(feature = "etcd")]
    specs.push(etcd::spec());
    specs
}
