//! etcd's own leases (the server's, not a `distlock_core::Lease`): one per client
//! and ttl, kept alive every ttl/3 on one keep-alive stream.
//!
//! Every lock key is attached to its client's lease for that ttl, so an
//! uncontended cycle needs no lease traffic of its own: the grant is amortised over
//! the client's life. The cost of sharing: when the lease ends, every key on it
//! goes, so all of that client's locks with that ttl are lost together.
//!
//! A lease is *tainted* once a key on it may outlive its owner's interest: a lease
//! that was abandoned (dropped without release) or whose release got no answer. A
//! tainted lease takes no new keys and is no longer kept alive once its last user
//! is gone, so such a key dies with the ttl, as the contract promises.

mod keeper;
mod slot;

use crate::client::{LeaseClient, LeaseGrantResponse};
use crate::error::Failure;
use crate::rpc::Rpc;
use distlock_core::LockError;
use keeper::Keeper;
pub(crate) use slot::Slot;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// How a lease ended, as far as this client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// The server says the lease is gone: every key on it was deleted.
    Expired,
    /// No keep-alive was answered for a whole ttl; the server may have expired it.
    Lapsed,
    /// The client stopped using it (idle, tainted, or the client was dropped).
    Retired,
}

#[derive(Debug, Clone, Copy)]
struct Health {
    /// When the last answered keep-alive (or the grant) was sent: the server keeps
    /// the lease at least until `acked_at + ttl`.
    acked_at: Instant,
    ended: Option<LeaseEnd>,
}

#[derive(Debug)]
struct Uses {
    /// Slot numbers taken per queue, so one client never puts one key twice.
    slots: HashMap<Vec<u8>, BTreeSet<u32>>,
    count: usize,
    tainted: bool,
    retired: bool,
    idle_since: Instant,
}

#[derive(Debug)]
struct LeaseState {
    id: i64,
    ttl: Duration,
    health: watch::Sender<Health>,
    uses: Mutex<Uses>,
    /// Tells the keeper that the lease may be retired now: its last user went
    /// and it is tainted or its client is gone.
    uses_changed: Notify,
    /// The client's leases; gone once the client is.
    pool: Weak<Pool>,
}

type Refresh = oneshot::Sender<Result<Instant, LeaseEnd>>;

/// A granted lease; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct SessionLease {
    state: Arc<LeaseState>,
    refresh: mpsc::UnboundedSender<Refresh>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps are updated in single statements; a panic cannot leave them torn.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SessionLease {
    /// The lease id.
    pub(crate) fn id(&self) -> i64 {
        self.state.id
    }

    /// The lease's ttl.
    pub(crate) fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// Records that the server no longer knows the lease (a request using it was
    /// refused): it takes no more keys, and held locks on it are lost.
    pub(crate) fn mark_expired(&self) {
        lock(&self.state.uses).retired = true;
        self.state
            .health
            .send_modify(|h| h.ended = Some(h.ended.unwrap_or(LeaseEnd::Expired)));
    }

    /// When the last answered keep-alive was sent: the key's validity starts here.
    pub(crate) fn acked_at(&self) -> Instant {
        self.state.health.borrow().acked_at
    }

    /// How the lease ended, if it did.
    pub(crate) fn ended(&self) -> Option<LeaseEnd> {
        self.state.health.borrow().ended
    }

    /// Completes when the lease ends in any way.
    pub(crate) async fn end(&self) -> LeaseEnd {
        let mut health = self.state.health.subscribe();
        match health.wait_for(|h| h.ended.is_some()).await {
            Ok(h) => h.ended.unwrap_or(LeaseEnd::Retired),
            Err(_) => LeaseEnd::Retired,
        }
    }

    /// Completes only when the server says the lease is gone.
    pub(crate) async fn expired(&self) {
        let mut health = self.state.health.subscribe();
        if health
            .wait_for(|h| h.ended == Some(LeaseEnd::Expired))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// Sends a keep-alive now and waits for its answer: the lease then lives at least
    /// until the returned instant + ttl.
    pub(crate) async fn refresh(&self, rpc: &Rpc) -> Result<Instant, Option<LeaseEnd>> {
        let (reply, answer) = oneshot::channel();
        self.refresh.send(reply).map_err(|_| self.ended())?;
        match tokio::time::timeout(rpc.timeout, answer).await {
            Ok(Ok(Ok(sent_at))) => Ok(sent_at),
            Ok(Ok(Err(end))) => Err(Some(end)),
            Ok(Err(_)) | Err(_) => Err(self.ended()),
        }
    }
}

type Pool = tokio::sync::Mutex<HashMap<i64, SessionLease>>;

/// A client's leases, one per ttl.
pub(crate) struct Leases {
    client: LeaseClient,
    rpc: Rpc,
    pool: Arc<Pool>,
    granted: Arc<AtomicU64>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("granted", &self.granted())
            .finish_non_exhaustive()
    }
}

impl Leases {
    pub(crate) fn new(client: LeaseClient, rpc: Rpc) -> Self {
        Leases {
            client,
            rpc,
            pool: Arc::default(),
            granted: Arc::default(),
        }
    }

    /// Leases granted so far.
    pub(crate) fn granted(&self) -> u64 {
        self.granted.load(Ordering::Relaxed)
    }

    /// The server's smallest lease ttl in seconds: etcd raises shorter grants to
    /// 1.5 × its election timeout, rounded up. Found by granting a 1 s lease.
    pub(crate) async fn probe_min_ttl(&self) -> Result<i64, Failure> {
        let client = &self.client;
        // The first request also connects, so only the caller's budget bounds it.
        let granted = client.grant(1).await.map_err(|e| {
            self.rpc
                .endpoints
                .classify("lease grant (probing the minimum ttl)", e)
        })?;
        let _ = self
            .rpc
            .call("lease revoke", client.revoke(granted.id()))
            .await;
        Ok(granted.ttl().max(1))
    }

    /// A slot in `queue` on this client's lease for `ttl_secs`, granting the lease
    /// if there is none that takes keys.
    pub(crate) async fn checkout(&self, ttl_secs: i64, queue: &[u8]) -> Result<Slot, Failure> {
        let mut pool = self.pool.lock().await;
        if let Some(slot) = pool.get(&ttl_secs).and_then(|lease| lease.claim(queue)) {
            return Ok(slot);
        }
        let lease = self.grant(ttl_secs).await?;
        let slot = lease
            .claim(queue)
            .ok_or_else(|| crate::error::protocol("a lease ended right after it was granted"))?;
        pool.insert(ttl_secs, lease);
        Ok(slot)
    }

    async fn grant(&self, ttl_secs: i64) -> Result<SessionLease, Failure> {
        let client = self.client.clone();
        let granted = grant_lease(&self.rpc, &client, ttl_secs).await?;
        let id = granted.id();
        if granted.ttl() != ttl_secs {
            let revoker = client.clone();
            tokio::spawn(async move { revoker.revoke(id).await });
            return Err(LockError::invalid_options(format!(
                "ttl {ttl_secs}s is below this etcd cluster's minimum lease ttl of {}s \
                 (1.5 × its election timeout, rounded up); use a ttl of at least {}s",
                granted.ttl(),
                granted.ttl()
            ))
            .into());
        }
        let sent_at = Instant::now();
        let link = self
            .rpc
            .retrying("lease keep-alive stream", || {
                let client = client.clone();
                async move { client.keep_alive(id).await }
            })
            .await?;
        self.granted.fetch_add(1, Ordering::Relaxed);
        let ttl = Duration::from_secs(ttl_secs.unsigned_abs());
        let state = Arc::new(LeaseState {
            id,
            ttl,
            health: watch::Sender::new(Health {
                acked_at: sent_at,
                ended: None,
            }),
            uses: Mutex::new(Uses {
                slots: HashMap::new(),
                count: 0,
                tainted: false,
                retired: false,
                idle_since: Instant::now(),
            }),
            uses_changed: Notify::new(),
            pool: Arc::downgrade(&self.pool),
        });
        let (refresh, refreshes) = mpsc::unbounded_channel();
        let keeper = Keeper {
            state: state.clone(),
            client,
            rpc: self.rpc.clone(),
            link: Some(link),
            pending: VecDeque::new(),
            ttl_secs,
        };
        tokio::spawn(keeper.run(refreshes));
        Ok(SessionLease { state, refresh })
    }
}

/// A new lease of `ttl_secs` (etcd may raise it to its minimum), retried
/// within the request timeout; a refusal in the reply is an error.
pub(crate) async fn grant_lease(
    rpc: &Rpc,
    client: &LeaseClient,
    ttl_secs: i64,
) -> Result<LeaseGrantResponse, Failure> {
    let granted = (rpc.retrying("lease grant", || client.grant(ttl_secs))).await?;
    if !granted.error().is_empty() {
        let why = format!("lease grant: {}", granted.error());
        return Err(LockError::backend(crate::error::BACKEND, why).into());
    }
    Ok(granted)
}

/// The ttl in whole seconds; core already rejects other ttls from the capabilities.
pub(crate) fn whole_seconds(ttl: Duration) -> Result<i64, LockError> {
    if ttl.subsec_nanos() != 0 || ttl.is_zero() {
        return Err(LockError::invalid_options(format!(
            "ttl {ttl:?} is not a whole number of seconds; etcd leases have whole-second ttls (minimum 1s)"
        )));
    }
    i64::try_from(ttl.as_secs()).map_err(|_| {
        LockError::invalid_options(format!("ttl {ttl:?} is too long for an etcd lease"))
    })
}
