//! The semaphore, in the layout of Apache Curator's `InterProcessSemaphoreV2`:
//!
//! ```text
//! /{namespace}/%semaphore/{escaped name}/locks/_c_{uuid}-lock-{seq}    the guard lock
//! /{namespace}/%semaphore/{escaped name}/leases/_c_{uuid}-lease-{seq}  one per permit
//! ```
//!
//! Invariant: a lease is a held permit only if, listed after it was created,
//! the leases directory had fewer than `limit` nodes older than it and no
//! older lease of the same slot. That alone keeps the permits within the
//! limit: of the permits alive at any moment, the newest saw all the others
//! when it listed (they were created before it and are still there), so they
//! were fewer than `limit`; and two permits of one slot cannot both hold,
//! since the newer saw the older. Curator's guard holder keeps a stricter
//! form of the same rule (create, then count every node), so the limit holds
//! across distlock and Curator clients. A claim that fails the check deletes
//! its lease at once.
//!
//! A claim takes the lowest slot free in the listing before it, and writes the
//! slot and limit into the lease (see `permit_node.rs`). An acquire first claims
//! without the guard (one listing, then the create and a second listing in one
//! round trip), so permits of a semaphore that is not full are handed out
//! concurrently. When the semaphore is full, or the claim lost a race, it
//! queues for the guard lock as Curator does, and the guard holder watches the
//! leases directory, claiming when a lease goes. The guard orders waiters, but
//! a client arriving just as a permit frees may claim it first: waiting is not
//! first come, first served.
//!
//! The limit lives in each permit, not in a node of its own: a client with
//! another limit is refused while any distlock permit of the name lives, and
//! once none does a new limit is accepted. (Curator's leases carry no limit,
//! so the check is among distlock clients only.) A permit's `czxid` is its
//! fencing token.

use crate::backend::{ZkBackend, ZkHandle, czxid_token, wait_ends};
use crate::keys::{self, NodeKind};
use crate::permit_node;
use crate::queue::{self, QueuedNode, Turn};
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, AcquiredPermit, Backend, BackendSemaphore, Bound, PermitInfo, PermitRequest,
    SemaphoreBackend, SemaphoreInspect, WaitUntil, lowest_free_slot,
};
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use std::sync::Arc;
use std::time::Instant;

/// A semaphore client for ZooKeeper, on the sessions of a [`crate::ZkLock`]
/// (`lock.semaphore()`).
pub type ZkSemaphore = BackendSemaphore<ZkSemaphoreBackend>;

/// How many claims an acquire makes without the guard while permits are free.
const FREE_CLAIMS: usize = 3;

/// What a guard holder whose session ended is told.
const WAITING: &str = "while waiting for a permit";

/// The ZooKeeper semaphore adapter. Its permits are nodes held like the
/// lock's, so renewal, release and the loss signal are the lock's own.
#[derive(Debug)]
pub struct ZkSemaphoreBackend {
    lock: Arc<ZkBackend>,
}

/// What one claim found.
enum Claim {
    Held(AcquiredPermit<Bound<ZkBackend>>),
    /// `limit` leases were there before our claim, or older than our lease.
    Full,
    /// An older lease took the same slot meanwhile.
    Conflict,
}

/// The slots of distlock's permits among `names`, refusing any of another
/// limit.
fn slots_of(names: &[String], req: &PermitRequest<'_>) -> Result<Vec<(u32, i64)>, LockError> {
    let mut slots = Vec::new();
    for name in names {
        let Some((slot, limit)) = permit_node::parse_permit_name(name) else {
            continue;
        };
        if limit != req.limit {
            return Err(req.mismatch(limit));
        }
        let sequence = NodeKind::of(name, &[NodeKind::Lease]).map_or(i64::MIN, |(_, seq)| seq);
        slots.push((slot, sequence));
    }
    Ok(slots)
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

    /// One claim: creates a lease in the lowest slot free in `listed` and keeps
    /// it if the listing sent right behind the create proves it a permit (see
    /// the module's invariant); otherwise deletes it.
    async fn claim(
        &self,
        session: &Arc<Session>,
        leases: &str,
        listed: Vec<String>,
        req: &PermitRequest<'_>,
    ) -> Result<Claim, LockError> {
        let taken = slots_of(&listed, req)?;
        let free = lowest_free_slot(req.limit, taken.iter().map(|(slot, _)| *slot));
        let (true, Some(slot)) = (listed.len() < req.limit as usize, free) else {
            return Ok(Claim::Full);
        };
        let data = permit_node::permit_data(slot, req.limit).into_bytes();
        let uuid = permit_node::permit_uuid(slot, req.limit);
        let (requests, client) = (&self.lock.requests, &session.client);
        let mut lease =
            queue::enqueue_as(uuid, session.clone(), leases.into(), NodeKind::Lease, data);
        let Some(node) = lease.state_mut() else {
            return Ok(Claim::Conflict);
        };
        let sent_at = Instant::now();
        // Joined, the listing goes out right behind the create, and the server
        // answers one session's requests in order.
        let (created, after) = tokio::join!(
            queue::create(requests, node),
            requests.children(client, leases)
        );
        let own = created.map_err(|e| self.lock.error(e))?;
        let mut after = after.map_err(|e| self.lock.error(e))?.unwrap_or_default();
        if !after.contains(&own.name) {
            // The create had to make the directory first: list again.
            let again = requests.children(client, leases).await;
            after = again.map_err(|e| self.lock.error(e))?.unwrap_or_default();
        }
        let own_sequence = NodeKind::of(&own.name, &[NodeKind::Lease]).map_or(0, |(_, seq)| seq);
        // Nodes that are not leases count as older: never in our favour.
        let older = (after.iter())
            .filter(|n| match NodeKind::of(n, &[NodeKind::Lease]) {
                Some((_, seq)) => keys::creation_key(seq, own_sequence) < 0,
                None => true,
            })
            .count();
        let verdict = match slots_of(&after, req) {
            Err(mismatch) => Err(mismatch),
            Ok(_) if older >= req.limit as usize => Ok(Claim::Full),
            Ok(slots)
                if slots
                    .iter()
                    .any(|(s, seq)| *s == slot && keys::creation_key(*seq, own_sequence) < 0) =>
            {
                Ok(Claim::Conflict)
            }
            Ok(_) => {
                let token = czxid_token(&own)?;
                let Some(QueuedNode { session, dir, .. }) = lease.disarm() else {
                    return Ok(Claim::Conflict);
                };
                let node = keys::node_path(&dir, &own.name);
                let handle = ZkHandle::new(session, node, own.czxid, req.acquire.ttl, sent_at);
                return Ok(Claim::Held(AcquiredPermit {
                    acquired: Acquired {
                        handle: Bound::new(self.lock.clone(), handle),
                        token,
                        sent_at,
                    },
                    slot,
                }));
            }
        };
        // Not a permit: out of the way at once (if this delete fails, the
        // lease's undo sends it again when dropped).
        if let Some(node) = lease.state_mut() {
            queue::withdraw(requests, node).await;
        }
        verdict
    }

    /// As the guard holder: claims, and while the semaphore is full watches
    /// the leases directory and claims again when it changes. `None` for
    /// `WaitUntil::No` when all permits are taken.
    async fn claim_in_turn(
        &self,
        session: &Arc<Session>,
        leases: &str,
        listed: Vec<String>,
        req: &PermitRequest<'_>,
    ) -> Result<Option<AcquiredPermit<Bound<ZkBackend>>>, LockError> {
        let requests = &self.lock.requests;
        let ended = session.ended();
        tokio::pin!(ended);
        let mut listed = listed;
        loop {
            match self.claim(session, leases, listed, req).await? {
                Claim::Held(permit) => return Ok(Some(permit)),
                Claim::Conflict => {}
                Claim::Full if req.acquire.wait == WaitUntil::No => return Ok(None),
                Claim::Full => {
                    let watched = requests.watch_children(&session.client, leases).await;
                    match watched.map_err(|e| self.lock.error(e))? {
                        Some((names, watcher)) if names.len() >= req.limit as usize => {
                            tokio::select! {
                                _ = watcher.changed() => {}
                                _ = &mut ended => {
                                    return Err(self.lock.error(session.ended_error(WAITING)));
                                }
                            }
                        }
                        // Freed meanwhile: claim from this listing.
                        listed_now => {
                            listed = listed_now.map(|(names, _)| names).unwrap_or_default();
                            continue;
                        }
                    }
                }
            }
            let again = requests.children(&session.client, leases).await;
            listed = again.map_err(|e| self.lock.error(e))?.unwrap_or_default();
        }
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
                let (slot, _) = permit_node::parse_permit_data(&data)?;
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
        // While permits are free no guard is needed: claim at once, again
        // after losing a slot to a concurrent claim (the next listing shows
        // the winner's slot taken), a few times before queueing.
        for _ in 0..FREE_CLAIMS {
            let claimed = async {
                let listed = self.lock.requests.children(&session.client, &leases).await;
                let listed = listed.map_err(|e| self.lock.error(e))?.unwrap_or_default();
                self.claim(&session, &leases, listed, &req).await
            };
            let claimed = tokio::select! {
                claim = claimed => claim?,
                _ = &mut wait_ends => return Err(acquire.not_acquired()),
            };
            match claimed {
                Claim::Held(permit) => return Ok(permit),
                Claim::Full if acquire.wait == WaitUntil::No => {
                    return Err(acquire.not_acquired());
                }
                Claim::Full => break,
                Claim::Conflict => {}
            }
        }
        // Then in line, as Curator waits: one guard holder at a time.
        let guard_dir = keys::node_path(&dir, keys::SEMAPHORE_LOCKS);
        let mut guard = queue::enqueue(session.clone(), guard_dir, NodeKind::Lock, Vec::new());
        let Some(node) = guard.state_mut() else {
            return Err(acquire.not_acquired());
        };
        let requests = &self.lock.requests;
        let in_turn = async {
            let turn = queue::wait_for_turn(requests, node, acquire.wait, Some(&leases)).await;
            match turn.map_err(|e| self.lock.error(e))? {
                Some(Turn { also, .. }) => self.claim_in_turn(&session, &leases, also, &req).await,
                None => Ok(None),
            }
        };
        let outcome = tokio::select! {
            outcome = in_turn => outcome,
            _ = &mut wait_ends => Ok(None),
        };
        // Whatever happened, the guard goes now (if this delete fails, the
        // guard's undo sends it again when dropped).
        queue::withdraw(requests, node).await;
        outcome?.ok_or_else(|| acquire.not_acquired())
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
                Some(PermitInfo::new(slot, token, holder))
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
