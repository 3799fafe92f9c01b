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

/// A backend's guarantees and limits. Adapters build it from
/// [`Capabilities::new`] (or [`Capabilities::consensus_queue`]) and the
/// setters, so a field added later does not break them:
///
/// ```
/// use distlock_core::{Capabilities, FencingGuarantee, TokenDurability, Wake};
/// use std::time::Duration;
/// const CAPS: Capabilities = Capabilities::new()
///     .fencing(FencingGuarantee::Strict)
///     .token_durability(TokenDurability::Persisted)
///     .wake(Wake::Push)
///     .min_ttl(Duration::from_millis(10));
/// assert!(!CAPS.fifo);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Whether the server forgets a name's state (token counters, limits,
    /// queue bookkeeping) once the name has been idle for the client's
    /// `state_ttl`, with tokens that still only rise afterwards. The suite runs
    /// the `state_is_collected` and `token_rises_after_state_collected` cases
    /// where it is offered.
    pub state_collection: Support,
    /// Whether the server can keep a lock past its holder's release and
    /// process, as a minimum hold ([`crate::AcquireOptions::min_hold`]) needs:
    /// an expiry an owner-checked renewal can set to any time left. Where it
    /// is not offered, the option is refused with this reason.
    pub min_hold: Support,
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
/// offered. Build it from [`Primitives::ALL`] or [`Primitives::lock_only`] and
/// the setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

    /// Whether semaphores are offered.
    pub const fn semaphore(mut self, support: Support) -> Self {
        self.semaphore = support;
        self
    }

    /// Whether leader election is offered.
    pub const fn election(mut self, support: Support) -> Self {
        self.election = support;
        self
    }

    /// Whether read-write locks are offered.
    pub const fn rwlock(mut self, support: Support) -> Self {
        self.rwlock = support;
        self
    }
}

/// Why [`Capabilities::new`] offers no primitive beyond the lock: an adapter
/// claims each one it offers.
const NOT_CLAIMED: &str = "this backend does not offer it";

/// Why [`Capabilities::new`] claims no minimum hold.
const NO_MIN_HOLD: &str = "this backend cannot keep a lock past its holder";

/// Why [`Capabilities::new`] claims no collection of idle state.
const KEEPS_STATE: &str = "this backend keeps a name's state until an operator deletes it";

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::new()
    }
}

impl Capabilities {
    /// The weakest claims, for an adapter to raise with the setters: fencing
    /// only under timing assumptions, tokens that do not survive a restart,
    /// polled wake-ups, no FIFO, not session-bound, ttls in whole milliseconds
    /// from 1 ms, no primitive beyond the lock, no collection of idle state,
    /// no minimum hold. A guarantee the suite tests is
    /// never claimed by default.
    pub const fn new() -> Self {
        Capabilities {
            fencing: FencingGuarantee::UnderTimingAssumptions,
            fifo: false,
            wake: Wake::Poll,
            session_bound: false,
            token_durability: TokenDurability::Volatile,
            min_ttl: Duration::from_millis(1),
            ttl_granularity: Duration::from_millis(1),
            primitives: Primitives::lock_only(NOT_CLAIMED),
            state_collection: Support::NotOffered(KEEPS_STATE),
            min_hold: Support::NotOffered(NO_MIN_HOLD),
        }
    }

    /// How strong the fencing tokens are.
    pub const fn fencing(mut self, fencing: FencingGuarantee) -> Self {
        self.fencing = fencing;
        self
    }

    /// Whether waiters acquire in arrival order.
    pub const fn fifo(mut self, fifo: bool) -> Self {
        self.fifo = fifo;
        self
    }

    /// How waiters wake when the lock is released.
    pub const fn wake(mut self, wake: Wake) -> Self {
        self.wake = wake;
        self
    }

    /// Whether the lock dies with a client session or connection.
    pub const fn session_bound(mut self, session_bound: bool) -> Self {
        self.session_bound = session_bound;
        self
    }

    /// What happens to tokens across a server restart.
    pub const fn token_durability(mut self, token_durability: TokenDurability) -> Self {
        self.token_durability = token_durability;
        self
    }

    /// The smallest ttl the backend accepts.
    pub const fn min_ttl(mut self, min_ttl: Duration) -> Self {
        self.min_ttl = min_ttl;
        self
    }

    /// What ttls must be a whole multiple of.
    pub const fn ttl_granularity(mut self, ttl_granularity: Duration) -> Self {
        self.ttl_granularity = ttl_granularity;
        self
    }

    /// Which primitives beyond the lock this backend offers.
    pub const fn primitives(mut self, primitives: Primitives) -> Self {
        self.primitives = primitives;
        self
    }

    /// Whether a lock can be kept past its holder (`min_hold`).
    pub const fn min_hold(mut self, support: Support) -> Self {
        self.min_hold = support;
        self
    }

    /// Whether idle names' state is collected (`state_ttl`).
    pub const fn state_collection(mut self, support: Support) -> Self {
        self.state_collection = support;
        self
    }

    /// A waiter queue on a consensus store, bound to a session or lease (etcd's
    /// create-revision queue, ZooKeeper's sequential nodes): strict fencing from
    /// the store's own revision, FIFO, push wake-ups, tokens that survive a
    /// restart.
    pub const fn consensus_queue(min_ttl: Duration, ttl_granularity: Duration) -> Self {
        Capabilities::new()
            .fencing(FencingGuarantee::Strict)
            .fifo(true)
            .wake(Wake::Push)
            .session_bound(true)
            .token_durability(TokenDurability::Persisted)
            .min_ttl(min_ttl)
            .ttl_granularity(ttl_granularity)
            .primitives(Primitives::ALL)
    }
}
