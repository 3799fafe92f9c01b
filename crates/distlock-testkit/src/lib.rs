//! The conformance suite for distlock adapters, and what it needs to run against
//! real servers.
//!
//! - [`cases`]: the conformance cases (listed there) as `pub async fn`s over a [`Harness`];
//!   each runs on every backend whose [`distlock_core::Capabilities`] and
//!   [`Hooks`] allow it.
//! - [`runner`]: turns them into named tests, `<backend>::<case>`.
//! - [`servers`]: native launchers for redis-server, etcd, ZooKeeper and MariaDB,
//!   and the peer links that cut a native cluster's member off its peers.
//! - [`proxy`]: a TCP fault proxy (delay, blackhole, reset, close).
//! - [`holder`]: runs a lock holder as a child process to pause or kill it.
//! - [`history`]: checks mutual exclusion and token order of a recorded run.
//! - [`chaos`]: the history checker under faults: K clients, random server,
//!   proxy, holder and (on a [`harness::Cluster`]) partition faults, a history
//!   file, and the checker that reads it.
//! - [`fences`]: the fence conformance cases, `<store>::<case>`, for every
//!   fenced store.
//! - [`state_rows`]: collection of idle per-name rows, seen behind the
//!   client's back, for the SQL adapters' own tests; [`support`]: what the
//!   adapters' own tests share besides (a server of their own, waiting for a
//!   condition, the `leaks` tests' length).
//!
//! A third-party adapter runs the same suite by implementing [`Harness`] and
//! passing a [`runner::BackendSpec`] to [`runner::trials`] in a
//! `harness = false` test.
#![deny(missing_docs)]

pub mod cases;
pub mod chaos;
pub mod fault;
pub mod fences;
pub mod harness;
pub mod history;
pub mod holder;
pub mod memory;
pub mod proxy;
pub mod runner;
pub mod servers;
pub mod state_rows;
pub mod support;

pub use cases::{CaseError, CaseResult, Scope};
pub use fault::{Fault, FaultControl};
pub use harness::{FaultyClient, Harness, Hooks};
pub use history::{History, Section, Violation};

/// Acquires and releases `key` `n` times in a row: the unit that round-trip tests
/// count server requests over (warm up with a few, then count over many).
pub async fn cycles(
    lock: &dyn distlock_core::DistributedLock,
    key: &distlock_core::LockKey,
    opts: &distlock_core::AcquireOptions,
    n: usize,
) -> Result<(), distlock_core::LockError> {
    for _ in 0..n {
        lock.acquire(key, opts).await?.release().await?;
    }
    Ok(())
}

/// Acquires and releases `key` twice through `lock` and checks that the second
/// token is above the first: the client really reaches the server (over TLS,
/// through a proxy) and the server keeps its counter.
pub async fn rising_tokens(
    lock: &dyn distlock_core::DistributedLock,
    key: &str,
) -> Result<(), CaseError> {
    let key = distlock_core::LockKey::new(key)?;
    let opts = distlock_core::AcquireOptions::new().ttl(std::time::Duration::from_secs(5));
    let first = lock.acquire(&key, &opts).await?;
    let token = first.token();
    first.release().await?;
    let again = lock.acquire(&key, &opts).await?;
    let next = again.token();
    again.release().await?;
    ensure!(next > token, "token {next} after {token}: tokens must rise");
    Ok(())
}
