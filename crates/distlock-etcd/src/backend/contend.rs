//! A contender's path through a revision queue, steps 1 to 3 of the protocol in
//! the parent module: put the key, wait for each predecessor's deletion, claim
//! on a lease still valid. Apart from the adapter's setup and its renew, release
//! and loss signal, because the lock, the read-write lock, the semaphore and the
//! election all queue through these same steps.

use super::{EtcdBackend, EtcdHandle};
use crate::error::{BACKEND, Failure, protocol};
use crate::etcd_lease::{LeaseEnd, SessionLease, Slot, whole_seconds};
use crate::keys::{contender_key, printable};
use crate::queue::QueueEntry;
use crate::watch::{OnCreate, Subscription, Wake};
use distlock_core::adapter::{AcquireRequest, Acquired, WaitUntil};
use distlock_core::{FencingToken, LockError};
use prost::bytes::Bytes;
use std::future::Future;
use std::sync::atomic::Ordering;
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

/// How often a lease may vanish under one acquire before it gives up.
const LEASE_RETRIES: usize = 2;

impl EtcdBackend {
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
        let key = Bytes::from(contender_key(queue.key_dir, lease.id(), slot.number()));
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
        if req.wait == WaitUntil::No {
            entry.remove().await?;
            return Err(req.not_acquired().into());
        }
        loop {
            // Step 2: watch the predecessor from the current revision, and re-read
            // the queue when it is deleted, or as soon as etcd has created the
            // watch (the predecessor may be gone already).
            if let Some((key, seen)) = predecessor.take() {
                let mut deletion = self.watches.deletion(&Bytes::from(key));
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
    /// `loss_watch` is a watch of the key the acquire opened already (a
    /// permit's); without one, the loss signal opens it (see `loss_signal`).
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
                own: tokio::sync::Mutex::new(None),
                own_id: Arc::default(),
            },
            token: FencingToken::new(revision.unsigned_abs()),
            sent_at: read_at.min(valid_from),
        })
    }

    /// A keep-alive that was not answered: the lease ended, or its stream is down.
    pub(super) fn refresh_error(&self, end: Option<LeaseEnd>) -> LockError {
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
