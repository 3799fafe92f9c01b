//! What `check` and `bench` need from a backend beyond the lock API: its native
//! round trip, its known deployment pitfalls, and an operator's deletion of a
//! lock. Each backend's probe speaks the backend's own protocol, with the
//! adapter's public layout helpers, so it finds exactly the adapter's keys.

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(any(feature = "redis", feature = "redlock"))]
mod redis;
// Each probe reads a different part of a URL: with one backend, the rest is unused.
#[cfg(any(
    feature = "redis",
    feature = "redlock",
    feature = "etcd",
    feature = "mysql"
))]
#[cfg_attr(not(feature = "full"), allow(dead_code))]
mod url;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use async_trait::async_trait;
use distlock::LockKey;
use std::time::Duration;

/// How long a probe waits for its connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Native access to a deployment, next to the lock client.
#[async_trait]
pub trait Probe: Send + Sync {
    /// The native request timed as the raw round trip (`PING`, `SELECT 1`, ...);
    /// `None` when there is no network to measure.
    fn round_trip_name(&self) -> Option<&'static str>;

    /// One native round trip.
    async fn round_trip(&self) -> Result<(), String>;

    /// Known pitfalls of this deployment, one warning each.
    async fn pitfalls(&self) -> Vec<String>;

    /// Deletes `key`'s lock behind its holder's back, as an operator would.
    /// Returns whether there was a lock to delete; `Err` also when the backend
    /// has no such operation.
    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String>;
}

/// The probe for `url`'s backend.
pub async fn connect(url: &str) -> Result<Box<dyn Probe>, String> {
    let scheme = distlock::scheme_of(url).map_err(|e| e.to_string())?;
    let connecting = async {
        match scheme.backend {
            "memory" => Ok(Box::new(Memory {
                store: distlock::memory_store(memory_name(url)),
            }) as Box<dyn Probe>),
            #[cfg(feature = "redis")]
            "redis" => redis::RedisProbe::connect(url, false)
                .await
                .map(|p| Box::new(p) as _),
            #[cfg(feature = "redlock")]
            "redlock" => redis::RedisProbe::connect(url, true)
                .await
                .map(|p| Box::new(p) as _),
            #[cfg(feature = "etcd")]
            "etcd" => etcd::EtcdProbe::connect(url)
                .await
                .map(|p| Box::new(p) as _),
            #[cfg(feature = "zookeeper")]
            "zookeeper" => zookeeper::ZkProbe::connect(url)
                .await
                .map(|p| Box::new(p) as _),
            #[cfg(feature = "mysql")]
            "mysql" => mysql::MySqlProbe::connect(url)
                .await
                .map(|p| Box::new(p) as _),
            other => Err(format!("no probe for the {other} backend in this build")),
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| format!("the probe connection did not open within {CONNECT_TIMEOUT:?}"))?
}

fn memory_name(url: &str) -> &str {
    let name = url.trim().split_once("://").map_or("", |(_, rest)| rest);
    name.strip_suffix('/').unwrap_or(name)
}

struct Memory {
    store: distlock::memory::MemoryStore,
}

#[async_trait]
impl Probe for Memory {
    fn round_trip_name(&self) -> Option<&'static str> {
        None
    }

    async fn round_trip(&self) -> Result<(), String> {
        Ok(())
    }

    async fn pitfalls(&self) -> Vec<String> {
        vec!["memory:// locks live in this process only: other processes never see them".into()]
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String> {
        Ok(self.store.delete(key))
    }
}

/// Parses `major.minor.patch` at the start of `text` (`3.5.17`, `11.4.2-MariaDB`).
#[allow(dead_code)]
pub fn version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}
