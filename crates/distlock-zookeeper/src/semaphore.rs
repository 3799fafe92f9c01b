//! The semaphore, in the layout of Apache Curator's `InterProcessSemaphoreV2`:
//!
//! ```text
//! /{namespace}/%semaphore/{escaped name}/locks/_c_{uuid}-lock-{seq}    the guard lock
//! /{namespace}/%semaphore/{escaped name}/leases/_c_{uuid}-lease-{seq}  one per permit
//! ```
//!
//! Invariant: a lease node is only ever created by the holder of the guard
//! lock, and only while fewer than `limit` lease nodes exist. So the leases
//! never outnumber the limit, across distlock and Curator clients alike. The
//! guard holder waits (watching the leases directory) until a lease goes, takes
//! the lowest slot no live distlock permit has, creates its lease with
//! `distlock slot={slot} limit={limit}` as data (Curator ignores lease data),
//! and releases the guard. A lease is a held permit from its creation until it
//! is deleted or its session ends; its `czxid` is the fencing token.
//!
//! The limit lives in each permit's data, not in a node of its own: a client
//! with another limit is refused while any distlock permit of the name lives,
//! and once none does a new limit is accepted. (Curator's leases carry no
//! limit, so the check is among distlock clients only.)

use crate::backend::{ZkBackend, ZkHandle, czxid_token, wait_ends};
use crate::keys::{self, NodeKind};
use crate::lease;
use crate::queue::{self, QueuedNode, Turn};
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::backend::{Acquired, Backend, WaitUntil};
use distlock_core::{
    AcquiredPermit, BackendSemaphore, Bound, Capabilities, FencingToken, LockError, LockKey,
    PermitInfo, PermitRequest, SemaphoreBackend, SemaphoreInspect, lowest_free_slot,
};
use std::sync::Arc;
use std::time::Instant;

/// A semaphore client for ZooKeeper, on the sessions of a [`crate::ZkLock`]
/// (`lock.semaphore()`).
pub type ZkSemaphore = BackendSemaphore<ZkSemaphoreBackend>;

/// What a guard holder whose session ended is told.
const WAITING: &str = "while waiting for a permit";

/// The ZooKeeper semaphore adapter. Its permits are nodes held like the
/// lock's, so renewal, release and the loss signal are the lock's own.
#[derive(Debug)]
pub struct ZkSemaphoreBackend {
    lock: Arc<ZkBackend>,
}

impl ZkSemaphoreBackend {
    /// Semaphores on `lock`'s sessions.
    pub fn new(lock: Arc<ZkBackend>) -> Self {
        ZkSemaphoreBackend { lock }
    }

    /// The leases directory of semaphore `name`.
    fn leases(&self, name: &str) -> String {
        let dir = keys::primitive_dir(&self.lock.namespace, keys::SEMAPHORES, name);
        keys::node_path(&dir, keys::SEMAPHORE_LEASES)
    }

    /// Under the guard lock: waits until fewer than `limit` leases exist and
    /// returns the lowest slot no live permit has; `None` for `NoWait` when
    /// all are taken. A live permit of another limit is a mismatch.
    ///
    /// `listed` is the leases directory as listed behind the guard's own
    /// listing that found us first: only releases can have changed it since
    /// (nobody else creates leases while we hold the guard), so when it shows
    /// a free permit, it is free. Only a full semaphore is listed again, with
    /// a watch.
    async fn free_slot(
        &self,
        session: &Session,
        leases: &str,
        listed: Vec<String>,
        req: &PermitRequest<'_>,
    ) -> Result<Option<u32>, LockError> {
        let requests = &self.lock.requests;
        let ended = session.ended();
        tokio::pin!(ended);
        let mut first = Some(listed);
        loop {
            let (names, watcher) = match first.take() {
                Some(names) => (names, None),
                None => match (requests.watch_children(&session.client, leases).await)
                    .map_err(|e| self.lock.error(e))?
                {
                    Some((names, watcher)) => (names, Some(watcher)),
                    None => (Vec::new(), None),
                },
            };
            let mut slots = Vec::new();
            for (slot, limit) in names.iter().filter_map(|n| lease::parse_permit_name(n)) {
                if limit != req.limit {
                    return Err(req.mismatch(limit));
                }
                slots.push(slot);
            }
            if names.len() < req.limit as usize
                && let Some(slot) = lowest_free_slot(req.limit, slots)
            {
                return Ok(Some(slot));
            }
            if req.acquire.wait == WaitUntil::NoWait {
                return Ok(None);
            }
            // Full at the first listing, or the directory went: list again,
            // this time with a watch.
            let Some(watcher) = watcher else { continue };
            tokio::select! {
                _ = watcher.changed() => {}
                _ = &mut ended => return Err(self.lock.error(session.ended_error(WAITING))),
            }
        }
    }

    /// Creates the permit's lease node in `slot` and deletes the guard node
    /// `guard` in one transaction.
    async fn create_lease(
        &self,
        session: Arc<Session>,
        leases: String,
        slot: u32,
        guard: &str,
        req: &PermitRequest<'_>,
    ) -> Result<AcquiredPermit<Bound<ZkBackend>>, LockError> {
        let data = lease::permit_data(slot, req.limit).into_bytes();
        let uuid = lease::permit_uuid(slot, req.limit);
        let mut lease = queue::enqueue_as(uuid, session, leases, NodeKind::Lease, data);
        let sent_at = Instant::now();
        let Some(node) = lease.state_mut() else {
            return Err(req.acquire.not_acquired());
        };
        let created = queue::create(&self.lock.requests, node, Some(guard)).await;
        let own = created.map_err(|e| self.lock.error(e))?;
        let token = czxid_token(&own)?;
        let Some(QueuedNode { session, dir, .. }) = lease.disarm() else {
            return Err(req.acquire.not_acquired());
        };
        let node = keys::node_path(&dir, &own.name);
        let handle = ZkHandle::new(session, node, own.czxid, req.acquire.ttl, sent_at);
        Ok(AcquiredPermit {
            acquired: Acquired {
                handle: Bound::new(self.lock.clone(), handle),
                token,
                sent_at,
            },
            slot,
        })
    }

    /// The live distlock permits of `key`: name, slot and czxid.
    async fn live(&self, key: &LockKey) -> Result<(String, Vec<(String, u32, i64)>), LockError> {
        let session = self.lock.inspector().await?;
        let leases = self.leases(key.as_str());
        let requests = &self.lock.requests;
        let names = requests.children(&session.client, &leases).await;
        let names = names.map_err(|e| self.lock.error(e))?.unwrap_or_default();
        let live = requests
            .children_data(&session.client, &leases, names)
            .await;
        let permits = (live.map_err(|e| self.lock.error(e))?.into_iter())
            .filter_map(|(name, data, stat)| {
                let (slot, _) = lease::parse_permit_data(&data)?;
                Some((name, slot, stat.czxid))
            })
            .collect();
        Ok((leases, permits))
    }
}

#[async_trait]
impl SemaphoreBackend for ZkSemaphoreBackend {
    type Permit = Bound<ZkBackend>;

    fn name(&self) -> &'static str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn acquire_permit(
        &self,
        req: PermitRequest<'_>,
    ) -> Result<AcquiredPermit<Bound<ZkBackend>>, LockError> {
        let acquire = req.acquire;
        let dir = keys::primitive_dir(&self.lock.namespace, keys::SEMAPHORES, acquire.key.as_str());
        let leases = keys::node_path(&dir, keys::SEMAPHORE_LEASES);
        let wait_ends = wait_ends(acquire.wait);
        tokio::pin!(wait_ends);
        let session = tokio::select! {
            session = self.lock.sessions.for_ttl(acquire.ttl, &self.lock.endpoint) => session?,
            _ = &mut wait_ends => return Err(acquire.not_acquired()),
        };
        let guard_dir = keys::node_path(&dir, keys::SEMAPHORE_LOCKS);
        let mut guard = queue::enqueue(session.clone(), guard_dir, NodeKind::Lock, Vec::new());
        let Some(node) = guard.state_mut() else {
            return Err(acquire.not_acquired());
        };
        let guarded = tokio::select! {
            turn = queue::wait_for_turn(&self.lock.requests, node, acquire.wait, Some(&leases)) => {
                turn.map_err(|e| self.lock.error(e))
            }
            _ = &mut wait_ends => Ok(None),
        };
        let slot = match guarded {
            Ok(Some(Turn { own, also, .. })) => tokio::select! {
                slot = self.free_slot(&session, &leases, also, &req) => slot.map(|slot| slot.map(|slot| (slot, own))),
                _ = &mut wait_ends => Ok(None),
            },
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        let outcome = match slot {
            Ok(Some((slot, own))) => {
                let guard = keys::node_path(&node.dir, &own.name);
                let permit = self.create_lease(session, leases, slot, &guard, &req).await;
                if permit.is_ok() {
                    queue::forget(node);
                }
                permit
            }
            Ok(None) => Err(acquire.not_acquired()),
            Err(e) => Err(e),
        };
        // Unless the lease's transaction deleted it, the guard goes now (if
        // this delete fails, the guard's undo sends it again when dropped).
        queue::withdraw(&self.lock.requests, node).await;
        outcome
    }

    fn inspect(&self) -> Option<&dyn SemaphoreInspect> {
        Some(self)
    }
}

#[async_trait]
impl SemaphoreInspect for ZkSemaphoreBackend {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let (_, live) = self.live(key).await?;
        let mut permits: Vec<PermitInfo> = (live.into_iter())
            .filter_map(|(holder, slot, czxid)| {
                let token = FencingToken::new(u64::try_from(czxid).ok()?);
                Some(PermitInfo {
                    slot,
                    token,
                    holder,
                })
            })
            .collect();
        permits.sort_by_key(|p| p.slot);
        Ok(permits)
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        let (leases, live) = self.live(key).await?;
        let Some((name, ..)) = live.into_iter().find(|(_, s, _)| *s == slot) else {
            return Ok(false);
        };
        let session = self.lock.inspector().await?;
        (self.lock.requests)
            .delete_node(&session.client, &keys::node_path(&leases, &name))
            .await
            .map_err(|e| self.lock.error(e))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let parts = [keys::SEMAPHORE_LOCKS, keys::SEMAPHORE_LEASES];
        let root = format!("/{}/{}", self.lock.namespace, keys::SEMAPHORES);
        self.lock.residue_in(root, prefix, &parts).await
    }
}
