//! What a backend provides to run the conformance cases: clients, and the fault
//! hooks it can offer.

use crate::fault::FaultControl;
use crate::servers::Launched;
use async_trait::async_trait;
use distlock_core::toolkit::Inspect;
use distlock_core::{BoxError, Capabilities, DynLock, LockKey};
use std::sync::Arc;
use std::time::Duration;

/// Which fault hooks a harness offers; cases that need a missing hook are
/// reported as ignored, never as passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hooks {
    /// The [`Harness::inspector`]'s `delete_holder` works.
    pub delete_lock: bool,
    /// [`Harness::faulty_client`] works.
    pub faulty_client: bool,
    /// [`Harness::dedicated`] works and its harness can [`Harness::restart_server`].
    pub restart: bool,
    /// The [`Harness::inspector`]'s `residue` works.
    pub residue: bool,
    /// [`Harness::lock_url`] reaches the same locks from another process, so a
    /// case can kill a holder there ([`crate::holder::use_lock_holder`]).
    pub holder_process: bool,
}

/// A client whose traffic can be faulted.
pub struct FaultyClient {
    /// The lock client.
    pub lock: DynLock,
    /// Controls the client's traffic.
    pub faults: Arc<dyn FaultControl>,
}

impl FaultyClient {
    /// A client and the control over its traffic.
    pub fn new(lock: DynLock, faults: Arc<dyn FaultControl>) -> Self {
        FaultyClient { lock, faults }
    }
}

impl std::fmt::Debug for FaultyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyClient")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

/// A clustered deployment as a chaos run faults it: its members are the
/// harness's [`Harness::launched_all`], in the same order, and each client the
/// harness hands out talks to one member.
#[async_trait]
pub trait Cluster: Send + Sync {
    /// The member that leads now, if one does.
    async fn leader(&self) -> Option<usize>;

    /// The member the `n`-th client the harness handed out (counting
    /// [`Harness::client`] and [`Harness::faulty_client`] alike; `c<n>` in a
    /// chaos run) talks to.
    fn member_of_client(&self, n: usize) -> Option<usize>;

    /// Cuts `member` off its peers until [`Cluster::heal`].
    fn partition(&self, member: usize) -> Result<(), BoxError>;

    /// Ends the partition of `member`.
    fn heal(&self, member: usize) -> Result<(), BoxError>;
}

/// A primary with an asynchronous replica as a chaos run fails it over
/// ([`crate::chaos::FaultKind::Failover`]): the harness's clients reach the
/// primary through one address, which the failover moves.
#[async_trait]
pub trait Failover: Send + Sync {
    /// Kills the primary, promotes its replica, moves the clients' address
    /// to it and starts a new replica of it; returns what happened for the
    /// history (the server names).
    async fn fail_over(&self) -> Result<String, BoxError>;
}

/// One backend under test. Cases run in parallel on one harness, each under its
/// own random key prefix.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The name used in test names, such as `redis` or `mysql_for_update`.
    fn name(&self) -> &str;

    /// The backend's capabilities.
    fn capabilities(&self) -> Capabilities;

    /// The fault hooks this harness offers.
    fn hooks(&self) -> Hooks;

    /// A new independent client with its own connections.
    async fn client(&self) -> Result<DynLock, BoxError>;

    /// A new independent client whose servers forget a name's state once it
    /// has been idle for `state_ttl` (the URL parameter of that name), for the
    /// bounded-state cases; a harness of a backend whose capabilities offer
    /// `state_collection` gives one.
    async fn client_with_state_ttl(&self, state_ttl: Duration) -> Result<DynLock, BoxError> {
        let _ = state_ttl;
        Err("this harness cannot set state_ttl".into())
    }

    /// A new client whose traffic goes through a fault injector.
    async fn faulty_client(&self) -> Result<FaultyClient, BoxError> {
        Err("this harness has no fault injection".into())
    }

    /// A client whose [`distlock_core::DistributedLock::inspect`] the fault hooks use: deleting
    /// a holder behind its back and counting residue go through the adapter's
    /// own [`Inspect`] implementation, as `distlock check` does. Harnesses keep
    /// one and hand out clones.
    async fn inspector(&self) -> Result<DynLock, BoxError> {
        Err("this harness has no inspector".into())
    }

    /// A harness on servers of its own, for cases that restart or kill them.
    async fn dedicated(&self) -> Result<Arc<dyn Harness>, BoxError> {
        Err("this harness cannot start dedicated servers".into())
    }

    /// The server this harness launched, if it launched one (an external server
    /// given by URL cannot be restarted, and its log is not ours to read).
    fn launched(&self) -> Option<&dyn Launched> {
        None
    }

    /// Every server this harness launched, for faults that hit one server of
    /// several (a Redlock node); by default the one [`Harness::launched`] gives.
    fn launched_all(&self) -> Vec<&dyn Launched> {
        self.launched().into_iter().collect()
    }

    /// The cluster its servers form, for the faults that cut one member off
    /// the others; `None` for a single server or independent nodes.
    fn cluster(&self) -> Option<&dyn Cluster> {
        None
    }

    /// Its primary and replica, for the fault that fails one over to the
    /// other; `None` for a single server.
    fn failover(&self) -> Option<&dyn Failover> {
        None
    }

    /// A URL `distlock::connect` accepts that reaches the same locks as
    /// [`Harness::client`] (namespace, table, strategy), for a lock holder in
    /// another process; `None` when there is no such URL (the memory backend).
    fn lock_url(&self) -> Option<String> {
        None
    }

    /// Restarts the server cleanly, keeping what the deployment persists. Only on
    /// a [`Harness::dedicated`] harness.
    async fn restart_server(&self) -> Result<(), BoxError> {
        let server = self
            .launched()
            .ok_or("this harness cannot restart an external server")?;
        Ok(server.restart().await?)
    }

    /// The tail of the server logs, printed when a case fails.
    fn server_logs(&self) -> String {
        self.launched()
            .map_or_else(String::new, |server| server.log_tail(40))
    }
}

impl dyn Harness + '_ {
    /// Deletes `key`'s holder behind its back, as an operator would; fails when
    /// there was no holder to delete.
    pub async fn delete_lock(&self, key: &LockKey) -> Result<(), BoxError> {
        let inspector = self.inspector().await?;
        if with_inspect(&inspector)?.delete_holder(key).await? {
            Ok(())
        } else {
            Err(format!("the inspector found no holder of `{key}` to delete").into())
        }
    }

    /// The lock artifacts (held keys, nodes, rows, queue entries) for names
    /// starting with `prefix`. Fence counters do not count.
    pub async fn residue(&self, prefix: &str) -> Result<Vec<String>, BoxError> {
        let inspector = self.inspector().await?;
        Ok(with_inspect(&inspector)?.residue(prefix).await?)
    }
}

fn with_inspect(lock: &DynLock) -> Result<&dyn Inspect, BoxError> {
    lock.inspect()
        .ok_or_else(|| format!("the {} client offers no Inspect", lock.name()).into())
}
