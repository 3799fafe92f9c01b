//! Faults a harness can inject between one client and its server.

use async_trait::async_trait;
use std::time::Duration;

/// What happens to a client's traffic from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Traffic flows normally.
    None,
    /// Every chunk, in both directions, is held back this long before it is forwarded.
    Delay(Duration),
    /// Bytes are accepted and dropped: the connection stays open and nothing answers,
    /// as in a network partition.
    Blackhole,
    /// Open connections are reset (RST); new connections are refused.
    Reset,
    /// Open connections are closed cleanly (FIN); new ones are accepted.
    Close,
}

/// Something that can apply a [`Fault`] to one client's traffic: the TCP fault proxy
/// for network backends, the store itself for the in-memory backend.
#[async_trait]
pub trait FaultControl: Send + Sync {
    /// Applies `fault` to the traffic from now on, replacing the previous fault.
    async fn set_fault(&self, fault: Fault);
}
