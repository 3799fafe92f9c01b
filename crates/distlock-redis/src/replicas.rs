//! Replication a lock can wait for: `WAIT` after each acquire and release,
//! so a failover to an acknowledging replica keeps the lock.

use std::time::Duration;

/// How many replicas must acknowledge each acquire and release, and how long to
/// wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    /// Replicas that must acknowledge.
    pub replicas: u32,
    /// How long the server waits for them (`WAIT`'s timeout).
    pub timeout: Duration,
}
