//! What an operator (and the test suite's fault hooks) can ask of a backend
//! beyond the lock API: who holds a key, what is left under a prefix, and a
//! forced deletion of a holder.

use crate::{FencingToken, HolderMeta, LockError, LockKey};
use async_trait::async_trait;
use std::time::Duration;

/// The current holder of a key, as the server records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's identity as stored: an owner value, a lease id, a node name.
    pub owner: String,
    /// The holder's fencing token, when the backend stores it beside the lock.
    pub token: Option<FencingToken>,
    /// How long the server keeps the lock if nobody renews it, when it says.
    pub expires_in: Option<Duration>,
    /// Who holds it (host, pid, label), when the holder recorded it: a lock
    /// taken by another client (Curator, `etcdctl`) or by an older distlock
    /// has none.
    pub meta: Option<HolderMeta>,
}

impl Holder {
    /// A holder as an adapter read it from the server.
    pub fn new(owner: String, token: Option<FencingToken>, expires_in: Option<Duration>) -> Holder {
        Holder {
            owner,
            token,
            expires_in,
            meta: None,
        }
    }

    /// A holder whose stored owner value may carry its metadata
    /// ([`HolderMeta::tag_owner`]): the owner is shown without it.
    pub fn from_tagged(
        value: &str,
        token: Option<FencingToken>,
        expires_in: Option<Duration>,
    ) -> Holder {
        let (owner, meta) = HolderMeta::split_owner(value);
        Holder::new(owner.to_owned(), token, expires_in).with_meta(meta)
    }

    /// The same holder with the metadata read beside it.
    pub fn with_meta(mut self, meta: Option<HolderMeta>) -> Holder {
        self.meta = meta;
        self
    }
}

/// The protocol floor of a backend ([`Inspect::floor`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Its requests, named (`acquire.lua + release.lua`, `put-if-absent txn +
    /// delete`).
    pub name: &'static str,
    /// How many requests one cycle costs as the servers count them
    /// ([`Inspect::server_requests`], every node summed), which `distlock
    /// bench`'s tests hold the counted figure to.
    pub requests: u32,
}

/// Server-side inspection and operator actions on an adapter's locks.
///
/// Every adapter implements it over its own data layout. `distlock check` and
/// `distlock status` use it, and so do the conformance suite's fault hooks
/// (deleting a holder behind its back, counting what a case left behind), so the
/// code that finds a lock on the server exists once, beside the code that
/// creates it.
#[async_trait]
pub trait Inspect: Send + Sync {
    /// Who holds `key` now, or `None` when nobody does.
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError>;

    /// Every lock artifact (held key, queued node, row with an owner, waiter
    /// entry) for lock names starting with `prefix`, one line each. Fence
    /// counters and other records kept on purpose do not count.
    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError>;

    /// How many records of per-name state (lock keys, token counters, limits,
    /// queue bookkeeping, rows) the servers hold for names starting with
    /// `prefix`, summed over every server: what the collection of idle state
    /// (`state_ttl`) bounds. `None` when the backend cannot count them.
    /// Records kept per namespace rather than per name (a high-water mark) do
    /// not count.
    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let _ = prefix;
        Ok(None)
    }

    /// What the servers use to keep their data, in bytes, and the name of
    /// that number (Redis `used_memory`, etcd's database size in use), summed
    /// over every server: what `distlock bench --names` watches rise and fall.
    /// `None` when the backend offers no such number.
    async fn server_memory(&self) -> Result<Option<(&'static str, u64)>, LockError> {
        Ok(None)
    }

    /// Deletes the current holder of `key` as an operator would (a force-unlock),
    /// waking the next waiter. Returns whether there was a holder. Dangerous on a
    /// live system: the holder keeps working until it notices, and only fencing
    /// protects the resource meanwhile.
    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError>;

    /// Deployment settings that weaken the lock (eviction, no persistence,
    /// replicas without acknowledgement...), one warning each.
    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        Ok(Vec::new())
    }

    /// The deployment the client found, in one line (the primary, its
    /// replicas and how it was found); `None` when the backend has nothing to
    /// say beyond its URL.
    async fn topology(&self) -> Result<Option<String>, LockError> {
        Ok(None)
    }

    /// The name of the backend's cheapest request (`PING`, `SELECT 1`), timed
    /// by benchmarks as the read round trip, a reference beside
    /// [`Inspect::floor_cycle`]; `None` without a network.
    fn ping_name(&self) -> Option<&'static str> {
        None
    }

    /// Sends that request once.
    async fn ping(&self) -> Result<(), LockError> {
        Ok(())
    }

    /// What [`Inspect::floor_cycle`] sends: the write sequence the backend's
    /// protocol itself needs for one uncontended cycle, which benchmarks time as
    /// the floor a lock cycle is compared with. `None` without one.
    fn floor(&self) -> Option<Floor> {
        None
    }

    /// Takes and gives back `key` once with the protocol's raw requests (the
    /// same statements, scripts or transactions the adapter sends, with a lock
    /// time of `ttl`), without the lease around them: no watchdog, no undo, no
    /// waiting. An error when the key is held. For benchmarks only: nothing
    /// protects a holder taken this way.
    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let _ = (key, ttl);
        Ok(())
    }

    /// How many requests the server (every node, summed) has received from all
    /// its clients so far, from the server's own counters (Redis `INFO stats`,
    /// etcd's gRPC metrics, ZooKeeper `mntr`, MySQL `Questions`); `None` when the
    /// backend cannot tell. Reading it may count as a request itself: compare
    /// two readings in a row to learn by how much.
    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        Ok(None)
    }
}
