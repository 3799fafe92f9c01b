//! What a backend guarantees, as typed flags. The conformance suite selects cases
//! from these, never from backend names.

use std::time::Duration;

/// How strong a backend's fencing tokens are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencingGuarantee {
    /// Tokens strictly increase per key whatever the timing (consensus-backed
    /// revisions, transactional counters).
    Strict,
    /// Tokens increase only while stated timing and persistence assumptions hold
    /// (Redlock: bounded clock drift, nodes that keep their counters).
    UnderTimingAssumptions,
}

/// How a waiter learns that the lock became free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The backend pushes an event (pub/sub, watch, in-process notification).
    Push,
    /// The waiter polls with backoff.
    Poll,
}

/// Whether fencing tokens keep rising across a server restart that loses state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenDurability {
    /// Tokens are stored durably by the server (revision, zxid, table row).
    Persisted,
    /// A lost counter is re-seeded from the server clock, so tokens keep rising as
    /// long as the server clock does not step back and fewer than one acquisition
    /// per microsecond happened on average.
    ServerClock,
    /// Tokens restart after a restart; there is no guarantee across restarts.
    Volatile,
}

/// A backend's guarantees and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// How strong the fencing tokens are.
    pub fencing: FencingGuarantee,
    /// Waiters acquire in arrival order.
    pub fifo: bool,
    /// How waiters wake when the lock is released.
    pub wake: Wake,
    /// The lock dies with a client session or connection (ZooKeeper session, MySQL
    /// connection), not only by TTL.
    pub session_bound: bool,
    /// What happens to tokens across a server restart.
    pub token_durability: TokenDurability,
    /// The smallest ttl the backend accepts.
    pub min_ttl: Duration,
    /// Ttls must be a whole multiple of this.
    pub ttl_granularity: Duration,
    /// Which primitives beyond the lock this backend offers.
    pub primitives: Primitives,
}

/// Whether a backend offers a primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Offered, with the lock's guarantees.
    Offered,
    /// Not offered, and why (a safety argument, or work not done yet).
    NotOffered(&'static str),
}

impl Support {
    /// True when offered.
    pub fn is_offered(self) -> bool {
        self == Support::Offered
    }

    /// Why it is not offered, if it is not.
    pub fn why_not(self) -> Option<&'static str> {
        match self {
            Support::Offered => None,
            Support::NotOffered(why) => Some(why),
        }
    }
}

/// The primitives beyond the lock a backend offers. The conformance suite runs
/// the `semaphore_*`, `election_*` and `rwlock_*` cases only where they are
/// offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Primitives {
    /// Semaphores with numbered permits ([`crate::DistributedSemaphore`]).
    pub semaphore: Support,
    /// Leader election ([`crate::LeaderElection`]).
    pub election: Support,
    /// Read-write locks ([`crate::DistributedRwLock`]).
    pub rwlock: Support,
}

impl Primitives {
    /// Every primitive: semaphore, election and read-write lock.
    pub const ALL: Primitives = Primitives {
        semaphore: Support::Offered,
        election: Support::Offered,
        rwlock: Support::Offered,
    };

    /// The lock only, with the reason given for every primitive.
    pub const fn lock_only(why: &'static str) -> Primitives {
        Primitives {
            semaphore: Support::NotOffered(why),
            election: Support::NotOffered(why),
            rwlock: Support::NotOffered(why),
        }
    }
}

impl Capabilities {
    /// A waiter queue on a consensus store, bound to a session or lease (etcd's
    /// create-revision queue, ZooKeeper's sequential nodes): strict fencing from
    /// the store's own revision, FIFO, push wake-ups, tokens that survive a
    /// restart.
    pub fn consensus_queue(min_ttl: Duration, ttl_granularity: Duration) -> Self {
        Capabilities {
            fencing: FencingGuarantee::Strict,
            fifo: true,
            wake: Wake::Push,
            session_bound: true,
            token_durability: TokenDurability::Persisted,
            min_ttl,
            ttl_granularity,
            primitives: Primitives::ALL,
        }
    }
}
