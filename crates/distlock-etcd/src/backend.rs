//! The lock protocol: etcd's own lock, the create-revision queue, step by step.
//!
//! Invariant: the holder of a lock is the key with the lowest create revision in the
//! lock's queue, and every key in a queue is attached to a live lease of its
//! client. A contender puts its key and, if it is not first, watches only the key
//! just before it, so each release wakes exactly one waiter. The fencing token is the
//! holder key's create revision: holders follow create order, and revisions are
//! raft-replicated and survive restarts, so tokens only rise.

use crate::client::{Client, KvClient};
use crate::error::BACKEND;
use crate::etcd_lease::{LeaseEnd, Leases, Slot};
use crate::keys::{printable, queue_prefix};
use crate::protocol::{delete_if_created_at, still_created_at};
use crate::rpc::Rpc;
use crate::watch::{KeyDeletion, Subscription, Watches};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendLock, LossSignal, Ownership,
};
use distlock_core::toolkit::Inspect;
use distlock_core::{Capabilities, LockError, LossReason, Support};
use prost::bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod contend;
mod own_lease;

pub(crate) use contend::Queue;

/// A lock client for etcd. Build it with [`crate::EtcdConfig`].
pub type EtcdLock = BackendLock<EtcdBackend>;

/// The etcd adapter. Reach it through [`BackendLock::backend`] for its counters.
pub struct EtcdBackend {
    pub(crate) client: Client,
    pub(crate) kv: KvClient,
    pub(crate) leases: Leases,
    pub(crate) watches: Watches,
    pub(crate) namespace: String,
    pub(crate) rpc: Rpc,
    min_ttl: Duration,
    wakeups: AtomicU64,
}

/// Counters of one client, for monitoring and for tests that count wake-ups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdStats {
    /// Leases granted (one per ttl in steady state; a new one after a lease ends).
    pub leases_granted: u64,
    /// Deletions delivered by the watch stream (waiters' predecessors and held keys).
    pub watch_events: u64,
    /// Watches created. A watch outlives its waiter or held lock for a while and
    /// serves the next one on the same key, so a client contending in a loop
    /// creates almost none.
    pub watches_created: u64,
    /// Times a queued waiter was woken by its predecessor's deletion.
    pub waiter_wakeups: u64,
    /// Held locks whose key was watched for loss. A lock's key is watched once
    /// it has been held for 10 to 20 ms, so a lock released sooner never is
    /// (a semaphore permit's is watched from its acquire and not counted).
    pub held_watches: u64,
}

/// What a held etcd lock keeps: its key, its create revision (the token), the
/// slot on its client's lease, and the lease of its own a minimum hold moved
/// the key to, if any.
pub struct EtcdHandle {
    key: Bytes,
    revision: i64,
    /// The store revision at which the key was seen holding; loss is watched after it.
    confirmed_at: i64,
    slot: Slot,
    releasing: Arc<AtomicBool>,
    /// The loss watch a permit's acquire opened on its key before putting
    /// it, until the loss signal takes it over (a lock's key is watched from
    /// the signal's first poll instead).
    loss_watch: Mutex<Option<Subscription>>,
    /// The lease of its own the key is on, once moved off the slot's lease
    /// (`backend/own_lease.rs`).
    own: tokio::sync::Mutex<Option<own_lease::OwnLease>>,
    /// That lease's id, read without waiting; 0 while the key is on the slot's.
    own_id: Arc<AtomicI64>,
}

impl std::fmt::Debug for EtcdHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdHandle")
            .field("key", &printable(&self.key))
            .field("revision", &self.revision)
            .field("lease", &format_args!("{:x}", self.lease_id()))
            .finish()
    }
}

impl EtcdHandle {
    /// The lock's key in etcd.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The lease the key is attached to.
    pub fn lease_id(&self) -> i64 {
        match self.own_id.load(Ordering::Acquire) {
            0 => self.slot.lease().id(),
            own => own,
        }
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.rpc.endpoints)
            .field("namespace", &self.namespace)
            .field("min_ttl", &self.min_ttl)
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Builds the adapter on a connected client, learning the cluster's minimum
    /// lease ttl with one grant (the first request, so it also proves the endpoints
    /// answer within `budget`).
    pub(crate) async fn start(
        client: &Client,
        namespace: String,
        rpc: Rpc,
        budget: Duration,
    ) -> Result<Self, LockError> {
        let leases = Leases::new(client.lease_client(), rpc.clone());
        let min_ttl = match tokio::time::timeout(budget, leases.probe_min_ttl()).await {
            Ok(Ok(secs)) => Duration::from_secs(secs.unsigned_abs()),
            Ok(Err(f)) => return Err(rpc.endpoints.lock_error(f)),
            Err(_) => {
                return Err(rpc
                    .endpoints
                    .unavailable(format!("no answer to a lease grant within {budget:?}")));
            }
        };
        Ok(EtcdBackend {
            client: client.clone(),
            kv: client.kv_client(),
            leases,
            watches: Watches::new(client.watch_client(), rpc.clone()),
            namespace,
            rpc,
            min_ttl,
            wakeups: AtomicU64::new(0),
        })
    }

    /// The underlying etcd client (logged in), for requests outside the lock
    /// protocol.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The raw key prefix all keys of this client live under.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// This client's counters so far.
    pub fn stats(&self) -> EtcdStats {
        EtcdStats {
            leases_granted: self.leases.granted(),
            watch_events: self.watches.delivered(),
            watches_created: self.watches.created(),
            waiter_wakeups: self.wakeups.load(Ordering::Relaxed),
            held_watches: self.watches.held_count(),
        }
    }

    /// The capabilities of an etcd whose minimum lease ttl is `min_ttl` (1 s for an
    /// etcd whose election timeout is at most 666 ms; 2 s with etcd's defaults).
    /// Leases have whole-second ttls.
    pub fn capabilities_with_min_ttl(min_ttl: Duration) -> Capabilities {
        // Every key of a name is on a lease: an idle name leaves nothing. A
        // minimum hold moves the key to a lease of its own (`own_lease.rs`).
        Capabilities::consensus_queue(min_ttl, Duration::from_secs(1))
            .state_collection(Support::Offered)
            .min_hold(Support::Offered)
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    type Handle = EtcdHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Self::capabilities_with_min_ttl(self.min_ttl)
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<EtcdHandle>, LockError> {
        let prefix = queue_prefix(&self.namespace, req.key);
        let meta = req.meta.encode();
        self.queue_up(req, &Queue::plain(&prefix), meta.as_bytes())
            .await
    }

    async fn renew(&self, handle: &EtcdHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let lease = handle.slot.lease();
        if ttl != lease.ttl() || handle.own_id.load(Ordering::Acquire) != 0 {
            return self.renew_to(handle, ttl).await;
        }
        let (refreshed, key) = tokio::join!(
            lease.refresh(&self.rpc),
            still_created_at(&self.rpc, &self.kv, &handle.key, handle.revision)
        );
        match refreshed {
            Err(Some(LeaseEnd::Expired)) => return Ok(Ownership::NotHeld),
            Err(end) => return Err(self.refresh_error(end)),
            Ok(_) => {}
        }
        match key {
            Ok(true) => Ok(Ownership::Held),
            Ok(false) => Ok(Ownership::NotHeld),
            Err(f) => Err(self.rpc.endpoints.lock_error(f)),
        }
    }

    async fn release(&self, handle: &EtcdHandle) -> Result<Ownership, LockError> {
        handle.releasing.store(true, Ordering::Release);
        match delete_if_created_at(&self.rpc, &self.kv, &handle.key, handle.revision).await {
            Ok(deleted) => {
                handle.slot.mark_clean();
                Ok(if deleted {
                    Ownership::Held
                } else {
                    Ownership::NotHeld
                })
            }
            Err(f) => Err(self.rpc.endpoints.lock_error(f)),
        }
    }

    fn loss_signal(&self, handle: &EtcdHandle) -> Option<LossSignal> {
        let lease = handle.slot.lease().clone();
        let own_id = handle.own_id.clone();
        // A permit's watch, opened by its acquire and handed over with the
        // handle (a second loss signal of the same handle watches the key anew).
        let handed = handle.loss_watch.lock().ok().and_then(|mut w| w.take());
        let watches = self.watches.clone();
        let deletion = KeyDeletion {
            rpc: self.rpc.clone(),
            kv: self.kv.clone(),
            key: handle.key.clone(),
            revision: handle.revision,
            seen: handle.confirmed_at,
            releasing: handle.releasing.clone(),
            clean: handle.slot.clean_flag(),
        };
        Some(Box::pin(async move {
            // The client's lease ending takes the key with it, unless a
            // minimum hold moved the key to a lease of its own: that lease's
            // end deletes the key, which the deletion watch sees.
            let shared_lease_ended = async {
                lease.expired().await;
                if own_id.load(Ordering::Acquire) != 0 {
                    std::future::pending::<()>().await;
                }
            };
            // A lock's key is watched from this first poll on. The lease's
            // watchdog polls the signal once the lease has lived for its grace
            // (10 to 20 ms), so a lock released sooner never watches its key and
            // receives no event of its own release: in an uncontended cycle
            // that event cost the client 7 % of its instructions. A deletion
            // before the watch starts is found by the read after `created`
            // (`OnCreate::RereadIfLater`).
            let first = handed.unwrap_or_else(|| watches.held(&deletion.key));
            tokio::select! {
                () = shared_lease_ended => LossReason::SessionEnded,
                reason = deletion.wait(first) => reason,
            }
        }))
    }

    fn abandoned(&self, handle: &EtcdHandle) {
        // A key on a lease of its own expires with it: nobody keeps that alive.
        if handle.own_id.load(Ordering::Acquire) == 0 {
            handle.slot.taint();
        }
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
