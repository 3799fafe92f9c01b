//! Bounded per-name state: how long a name's keys outlive its leases
//! (`state_ttl`), and the high-water key a collected counter seeds from.
//!
//! Every key of a name expires on the server: the lock and share keys with
//! their leases, queue places with their places, and the fence counters
//! (`{name}:fence`, `:sem:fence`, `:rw:fence`) `state_ttl` after the expiry of
//! the last lease that used them. Each grant and renewal extends the counter
//! to at least the lease's ttl plus `state_ttl` (never shortening it, and
//! giving an expiry to a counter an earlier release left without one), so a
//! held name never loses its counter, and no scan or process collects anything.
//!
//! Tokens never go back across a collection, by construction: every grant
//! raises the namespace's high-water key (one per slot in a Redis Cluster, in
//! the name's slot, see `keys.rs`) to its token in the same script, and a
//! missing counter starts from the higher of the server clock in µs and that
//! high-water. The high-water never expires, so it is above every token of the
//! name while the server keeps its data; the clock only matters when the
//! high-water itself was lost (a restart without persistence, a failover to a
//! replica that missed it), as before.

use crate::keys::high_water;
use std::time::Duration;

/// One client's view of per-name state on one server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct State {
    ttl: Duration,
    cluster: bool,
}

impl State {
    /// Counters kept `ttl` past their last lease, on a Redis Cluster or not.
    pub fn new(ttl: Duration, cluster: bool) -> Self {
        State { ttl, cluster }
    }

    /// The namespace's high-water key for the name that `name_key` (any of
    /// its keys) belongs to.
    pub fn high_water(&self, name_key: &str) -> String {
        high_water(name_key, self.cluster)
    }

    /// How long, in ms, a grant or renewal of `lease_ttl` keeps the counter.
    pub fn keep_ms(&self, lease_ttl: Duration) -> u64 {
        let keep = lease_ttl.saturating_add(self.ttl);
        u64::try_from(keep.as_millis()).unwrap_or(u64::MAX)
    }
}
