//! The lock protocol: etcd's own lock, the create-revision queue, step by step.
//!
//! Invariant: the holder of a lock is the key with the lowest create revision in the
//! lock's queue, and every key in a queue is attached to a live lease of its
//! client. A contender puts its key and, if it is not first, watches only the key
//! just before it, so each release wakes exactly one waiter. The fencing token is the
//! holder key's create revision: holders follow create order, and revisions are
//! raft-replicated and survive restarts, so tokens only rise.

use crate::error::{BACKEND, Failure, protocol};
use crate::keys::{contender_key, printable, queue_prefix};
use crate::lease::{LeaseEnd, Leases, SessionLease, Slot, whole_seconds};
use crate::protocol::{delete_if_created_at, still_created_at};
use crate::queue::QueueEntry;
use crate::rpc::Rpc;
use crate::watch::{KeyDeletion, OnCreate, Subscription, Wake, Watches};
use async_trait::async_trait;
use distlock_core::backend::{AcquireRequest, Acquired, Backend, LossSignal, Ownership, WaitUntil};
use distlock_core::toolkit::Inspect;
use distlock_core::{
    BackendLock, Capabilities, FencingToken, LockError, LossReason, Primitives, Support,
};
use etcd_client::KvClient;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A revision queue and which of its older keys block a contender.
pub(crate) struct Queue<'a> {
    /// The whole queue: the holder is its oldest key.
    pub all: &'a [u8],
    /// Where this contender's key goes (the queue itself, or its `read/` or
    /// `write/` part).
    pub key_dir: &'a [u8],
    /// For a reader: only older keys under this prefix (the writers) block it.
    /// `None`: every older key blocks.
    pub blocked_by_writes_under: Option<&'a [u8]>,
}

impl<'a> Queue<'a> {
    /// A lock's (or an election's) queue: every older key blocks.
    pub fn plain(prefix: &'a [u8]) -> Self {
        Queue {
            all: prefix,
            key_dir: prefix,
            blocked_by_writes_under: None,
        }
    }
}

/// A lock client for etcd. Build it with [`crate::EtcdConfig`].
pub type EtcdLock = BackendLock<EtcdBackend>;

/// How often a lease may vanish under one acquire before it gives up.
const LEASE_RETRIES: usize = 2;

/// The etcd adapter. Reach it through [`BackendLock::backend`] for its counters.
pub struct EtcdBackend {
    pub(crate) client: etcd_client::Client,
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
}

/// What a held etcd lock keeps: its key, its create revision (the token) and the
/// slot on its client's lease.
pub struct EtcdHandle {
    key: Vec<u8>,
    revision: i64,
    /// The store revision at which the key was seen holding; loss is watched after it.
    confirmed_at: i64,
    slot: Slot,
    releasing: Arc<AtomicBool>,
    /// The loss watch the acquire opened, when it is not kept by the stream
    /// task for the loss signal to find (`Watches::deletion_once`).
    loss_watch: Mutex<Option<Subscription>>,
}

impl std::fmt::Debug for EtcdHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdHandle")
            .field("key", &printable(&self.key))
            .field("revision", &self.revision)
            .field("lease", &format_args!("{:x}", self.slot.lease().id()))
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
        self.slot.lease().id()
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
        client: &etcd_client::Client,
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
    pub fn client(&self) -> &etcd_client::Client {
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
        }
    }

    /// The capabilities of an etcd whose minimum lease ttl is `min_ttl` (1 s for an
    /// etcd whose election timeout is at most 666 ms; 2 s with etcd's defaults).
    /// Leases have whole-second ttls.
    pub fn capabilities_with_min_ttl(min_ttl: Duration) -> Capabilities {
        Capabilities {
            primitives: Primitives {
                semaphore: Support::Offered,
                election: Support::Offered,
                rwlock: Support::Offered,
            },
            ..Capabilities::consensus_queue(min_ttl, Duration::from_secs(1))
        }
    }

    /// Queues in `queue` until its turn, on a lease of `req.ttl` (retrying on a
    /// fresh lease when the server expired the one in use unnoticed).
    pub(crate) async fn queue_up(
        &self,
        req: AcquireRequest<'_>,
        queue: &Queue<'_>,
        value: &[u8],
    ) -> Result<Acquired<EtcdHandle>, LockError> {
        self.on_lease(req.ttl, queue.all, |slot| {
            self.contend(&req, queue, slot, value)
        })
        .await
    }

    /// Runs `attempt` with a slot in `queue` on this client's lease for `ttl`,
    /// again on a fresh lease when the server expired the one in use before the
    /// client noticed.
    pub(crate) async fn on_lease<T, F, A>(
        &self,
        ttl: Duration,
        queue: &[u8],
        mut attempt: A,
    ) -> Result<T, LockError>
    where
        A: FnMut(Slot) -> F,
        F: Future<Output = Result<T, Failure>>,
    {
        let ttl_secs = whole_seconds(ttl)?;
        let mut retries = 0;
        loop {
            let slot = self
                .leases
                .checkout(ttl_secs, queue)
                .await
                .map_err(|f| self.rpc.endpoints.lock_error(f))?;
            let lease = slot.lease().clone();
            match attempt(slot).await {
                Err(Failure::LeaseNotFound) if retries < LEASE_RETRIES => {
                    // The lease expired on the server before the client noticed:
                    // retire it and queue again on a fresh one.
                    lease.mark_expired();
                    retries += 1;
                }
                outcome => return outcome.map_err(|f| self.rpc.endpoints.lock_error(f)),
            }
        }
    }

    /// One contender's whole life in the queue: put, then wait for each predecessor
    /// to go, until ours is the oldest key.
    async fn contend(
        &self,
        req: &AcquireRequest<'_>,
        queue: &Queue<'_>,
        slot: Slot,
        value: &[u8],
    ) -> Result<Acquired<EtcdHandle>, Failure> {
        let lease = slot.lease().clone();
        let key = contender_key(queue.key_dir, lease.id(), slot.number());
        // The held key's loss watch, asked for before the key is put, so it usually
        // starts before the key is first read as ours and needs no read of its own.
        // Kept through the wait; the loss signal then takes the same watch over.
        let _held = self.watches.deletion(&key);
        let mut entry = QueueEntry::new(self.rpc.clone(), self.kv.clone(), key, slot);
        let sent_at = Instant::now();
        // Step 1: put our key, read the holder and our predecessor.
        let first = entry.enqueue(queue.all, lease.id(), value).await?;
        if first.holder {
            return self
                .claim(entry, &lease, (first.revision, first.header), sent_at, None)
                .await;
        }
        let mut predecessor = first.predecessor.map(|key| (key, first.header));
        if let Some(writes) = queue.blocked_by_writes_under {
            // A reader is blocked only by an older write key, which the first look
            // cannot tell: read the newest one now.
            predecessor = None;
            let read_at = Instant::now();
            let check = entry.recheck(writes, first.revision).await?;
            match check.predecessor {
                Some(key) => predecessor = Some((key, check.header)),
                None if check.mine => {
                    return self
                        .claim(entry, &lease, (first.revision, check.header), read_at, None)
                        .await;
                }
                None => {}
            }
        }
        if req.wait == WaitUntil::NoWait {
            entry.remove().await?;
            return Err(req.not_acquired().into());
        }
        loop {
            // Step 2: watch the predecessor from the current revision, and re-read
            // the queue when it is deleted, or as soon as etcd has created the
            // watch (the predecessor may be gone already).
            if let Some((key, seen)) = predecessor.take() {
                let mut deletion = self.watches.deletion(&key);
                self.wait_in_queue(
                    &mut entry,
                    (&mut deletion, OnCreate::Reread),
                    seen,
                    &lease,
                    req,
                )
                .await?;
            }
            let read_at = Instant::now();
            let blockers = queue.blocked_by_writes_under.unwrap_or(queue.all);
            let check = entry.recheck(blockers, first.revision).await?;
            if !check.mine {
                entry.mark_gone();
                let gone = format!("the queued key {} disappeared", printable(entry.key()));
                return Err(self.rpc.endpoints.lease_gone(&gone).into());
            }
            match check.predecessor {
                // The same key again: the read saw it still there, created before
                // ours, so only a deletion after the read matters.
                Some(key) => predecessor = Some((key, check.header)),
                None => {
                    return self
                        .claim(entry, &lease, (first.revision, check.header), read_at, None)
                        .await;
                }
            }
        }
    }

    /// Waits until `watched` (a key, or a range, read at revision `seen`) may
    /// have lost a key (deleted, or watched only since later), the lease ends,
    /// or the caller's wait is over. An earlier round's watch of the same key is
    /// handed back by the stream task. When the wait is over, `entry`'s key is
    /// deleted before returning, so a process that exits right after a timeout
    /// leaves no queue entry behind (if that fails, the entry's undo retries in
    /// the background).
    pub(crate) async fn wait_in_queue(
        &self,
        entry: &mut QueueEntry,
        (watched, on_create): (&mut Subscription, OnCreate),
        seen: i64,
        lease: &SessionLease,
        req: &AcquireRequest<'_>,
    ) -> Result<(), Failure> {
        let waited = tokio::select! {
            wake = watched.wake(seen, on_create) => match wake {
                Ok(Wake::Deleted) => {
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Ok(Wake::Reread) => Ok(()),
                Err(reason) => Err(LockError::backend(BACKEND, reason).into()),
            },
            end = lease.end() => Err(self.lease_error(end).into()),
            _ = req.wait.reached() => Err(req.not_acquired().into()),
        };
        if waited.is_err() && req.wait.instant().is_some_and(|end| Instant::now() >= end) {
            let _ = entry.remove().await;
        }
        waited
    }

    /// Step 3: ours is the oldest key. Before claiming, re-check the lease: the
    /// key's validity is the lease's, measured from its last answered keep-alive.
    pub(crate) async fn claim(
        &self,
        entry: QueueEntry,
        lease: &SessionLease,
        (revision, header): (i64, i64),
        read_at: Instant,
        loss_watch: Option<Subscription>,
    ) -> Result<Acquired<EtcdHandle>, Failure> {
        if let Some(end) = lease.ended() {
            return Err(self.lease_error(end).into());
        }
        let ttl = lease.ttl();
        let mut valid_from = lease.acked_at();
        if valid_from.elapsed() > ttl / 2 {
            valid_from = lease
                .refresh(&self.rpc)
                .await
                .map_err(|end| self.refresh_error(end))?;
        }
        let (key, slot) = entry
            .into_held()
            .ok_or_else(|| Failure::from(protocol("queue entry handed over twice")))?;
        Ok(Acquired {
            handle: EtcdHandle {
                key,
                revision,
                confirmed_at: header,
                slot,
                releasing: Arc::default(),
                loss_watch: Mutex::new(loss_watch),
            },
            token: FencingToken::new(revision.unsigned_abs()),
            sent_at: read_at.min(valid_from),
        })
    }

    /// A keep-alive that was not answered: the lease ended, or its stream is down.
    fn refresh_error(&self, end: Option<LeaseEnd>) -> LockError {
        match end {
            Some(end) => self.lease_error(end),
            None => self.rpc.endpoints.unavailable(
                "the lease keep-alive got no answer (its stream is down or reconnecting)",
            ),
        }
    }

    fn lease_error(&self, end: LeaseEnd) -> LockError {
        match end {
            LeaseEnd::Lapsed => self.rpc.endpoints.unavailable("no keep-alive of the client's lease was answered for a whole ttl, so the lease may have expired"),
            LeaseEnd::Expired | LeaseEnd::Retired => self.rpc.endpoints.lease_gone("the lease expired while waiting"),
        }
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
        self.queue_up(req, &Queue::plain(&prefix), b"").await
    }

    async fn renew(&self, handle: &EtcdHandle, _ttl: Duration) -> Result<Ownership, LockError> {
        let lease = handle.slot.lease();
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
        // The watch the acquire opened, which its end left to the next subscriber
        // of the key. Subscribed now rather than on first poll, so it is in place
        // however soon the lock is released.
        let handed = handle.loss_watch.lock().ok().and_then(|mut w| w.take());
        let first = handed.unwrap_or_else(|| self.watches.deletion(&handle.key));
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
            tokio::select! {
                _ = lease.expired() => LossReason::SessionEnded,
                reason = deletion.wait(first) => reason,
            }
        }))
    }

    fn abandoned(&self, handle: &EtcdHandle) {
        handle.slot.taint();
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
