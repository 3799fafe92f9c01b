//! The lock protocol on a JetStream KV bucket, step by step.
//!
//! Invariant: a lock is held by the owner named in its key's last record, from
//! the write that granted it until its holder releases it or stops renewing for
//! a ttl. Every grant, renewal, takeover and release is one compare-and-set on
//! the key's last revision, so two writers can never both succeed from the same
//! state. NATS 2.9 has no per-message expiry, so expiry is judged by the
//! contenders without any server clock: a contender that has seen the same
//! revision unchanged for the record's ttl (plus drift) on its own monotonic
//! clock knows the holder's own deadline has passed (the holder measured it from
//! before that write, the contender from after it) and takes over with a write
//! expecting that revision. The token is the granting write's revision (with
//! the bucket's creation second above it, see [`crate::protocol::token`]),
//! carried in the record so renewals keep it.

use crate::epoch::EpochCache;
use crate::error::{BACKEND, Servers, Written};
use crate::keys::lock_key;
use crate::listening::{Deletions, Listening};
use crate::markers::Markers;
use crate::protocol::{self, Record, Slot};
use crate::sightings::Sightings;
use crate::signal;
use crate::sweep::Sweep;
use async_nats::jetstream::Context;
use async_nats::jetstream::kv::Store;
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendLock, DynLeaderChanges, LossSignal, Ownership,
    clock_drift,
};
use distlock_core::toolkit::{CancelGuard, Inspect, random_owner};
use distlock_core::{
    Capabilities, FencingGuarantee, FencingToken, LockError, LockKey, Primitives, Support,
    TokenDurability, Wake,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A lock client for NATS JetStream KV. Build it with [`crate::NatsConfig`].
pub type NatsLock = BackendLock<NatsBackend>;

/// The NATS adapter: one bucket, reached through one client.
pub struct NatsBackend {
    pub(crate) js: Context,
    /// The connection under `js`, for the loss signal's subscriptions.
    client: async_nats::Client,
    /// Shared with the background tasks (the loss watch, the marker
    /// collection) rather than cloned: a `Store` carries its stream's whole
    /// information, and cloning it cost 5k instructions a cycle.
    pub(crate) kv: Arc<Store>,
    pub(crate) servers: Servers,
    epoch: Arc<EpochCache>,
    sweep: Arc<Sweep>,
    markers: Arc<Markers>,
    sightings: Sightings,
    /// This client's deletions of held locks, for its own leases' loss
    /// signals (the client is not sent its own writes).
    pub(crate) deletions: Deletions,
}

impl std::fmt::Debug for NatsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBackend")
            .field("servers", &self.servers)
            .field("bucket", &self.kv.name)
            .finish_non_exhaustive()
    }
}

/// What a held NATS lock keeps: its key, owner, granting revision and the
/// revision of its last write, which the next renewal or the release expects.
#[derive(Debug)]
pub struct NatsHandle {
    key: String,
    owner: String,
    granted: u64,
    revision: AtomicU64,
    /// Set when the holder releases, so its own marker is not taken for a loss.
    releasing: Arc<AtomicBool>,
    /// What the loss signal listens on, set up before the granting write,
    /// until the loss signal takes it.
    listening: Mutex<Option<Listening>>,
}

impl NatsHandle {
    /// The lock's key in the bucket.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl NatsBackend {
    /// The capabilities of every NATS lock client.
    pub const CAPABILITIES: Capabilities = Capabilities::new()
        .fencing(FencingGuarantee::Strict)
        .wake(Wake::Push)
        .token_durability(TokenDurability::Persisted)
        .min_ttl(Duration::from_millis(100))
        .ttl_granularity(Duration::from_millis(1))
        .primitives(Primitives::ALL)
        .min_hold(Support::Offered)
        .state_collection(Support::Offered);

    /// The backend on an opened bucket: its epoch read once, and the sweeps
    /// that collect records idle for `state_ttl` past their lease.
    pub(crate) async fn open(
        js: Context,
        kv: Store,
        servers: Servers,
        state_ttl: Duration,
    ) -> Result<Self, LockError> {
        let epoch = Arc::new(EpochCache::read(&kv.stream, &servers).await?);
        let sweep = Arc::new(Sweep::new(state_ttl));
        let kv = Arc::new(kv);
        Ok(NatsBackend {
            client: js.client(),
            js,
            markers: Markers::new(kv.clone(), servers.clone()),
            kv,
            servers,
            epoch,
            sweep,
            sightings: Sightings::default(),
            deletions: Deletions::default(),
        })
    }

    /// The bucket the locks live in.
    pub fn bucket(&self) -> &str {
        &self.kv.name
    }

    /// The KV store, for requests outside the lock protocol.
    pub fn store(&self) -> &Store {
        &self.kv
    }

    /// The token of a grant at `revision`, or `None` when the bucket was
    /// recreated since (the grant went with it).
    async fn token(&self, revision: u64) -> Result<Option<FencingToken>, LockError> {
        self.epoch
            .token(&self.kv.stream, &self.servers, revision)
            .await
    }

    /// The revision of the key's last record if it is still `handle`'s grant.
    async fn still_mine(&self, handle: &NatsHandle) -> Result<Option<u64>, LockError> {
        Ok(
            match protocol::read(&self.kv, &self.servers, &handle.key).await? {
                Slot::Held {
                    revision, record, ..
                } if record.owner == handle.owner
                    && protocol::granted_at(revision, &record) == handle.granted =>
                {
                    Some(revision)
                }
                _ => None,
            },
        )
    }

    /// Releases `owner`'s grant of `key` if it has one, for a cancelled acquire.
    fn undo(&self, key: String, owner: String) -> distlock_core::toolkit::UndoFuture {
        let (js, kv, servers) = (self.js.clone(), self.kv.clone(), self.servers.clone());
        let markers = self.markers.clone();
        Box::pin(async move {
            if let Ok(Slot::Held {
                revision, record, ..
            }) = protocol::read(&kv, &servers, &key).await
                && record.owner == owner
                && let Written::At(marker) =
                    protocol::remove(&js, &kv, &servers, &key, revision).await
            {
                markers.collect_later(key, marker);
            }
        })
    }

    /// Puts a release marker on `key` expecting `revision`, then collects it.
    pub(crate) async fn remove(&self, key: &str, revision: u64) -> Written<()> {
        match protocol::remove(&self.js, &self.kv, &self.servers, key, revision).await {
            Written::At(marker) => {
                self.markers.collect_later(key.to_owned(), marker);
                Written::At(())
            }
            Written::Conflict => Written::Conflict,
            Written::Unknown(e) => Written::Unknown(e),
        }
    }

    /// One grant attempt over `slot`: the write, and when its reply is lost, a
    /// read that tells whether it was applied (our owner in the record); then
    /// the token. Armed to undo until the token is known.
    async fn grant(
        &self,
        key: &str,
        record: &Record,
        slot: &Slot,
    ) -> Result<Option<(u64, FencingToken, Instant)>, LockError> {
        let sent_at = Instant::now();
        // What the undo needs is copied only if it runs.
        let guard = CancelGuard::new((), |()| {
            Some(self.undo(key.to_owned(), record.owner.clone()))
        });
        let granted =
            match protocol::write(&self.kv, &self.servers, key, record, slot.revision()).await {
                Written::At(revision) => Some(revision),
                Written::Conflict => None,
                Written::Unknown(e) => match protocol::read(&self.kv, &self.servers, key).await {
                    Ok(Slot::Held {
                        revision,
                        record: r,
                        ..
                    }) if r.owner == record.owner => Some(protocol::granted_at(revision, &r)),
                    Ok(_) => None,
                    // Still unknown: the guard's undo releases it if it was applied.
                    Err(_) => return Err(e),
                },
            };
        // Not applied: nothing to undo, and an undo left armed would run later,
        // when a next attempt of this acquire (same owner) may hold the lock.
        let Some(granted) = granted else {
            guard.disarm();
            return Ok(None);
        };
        let token = self.token(granted).await?;
        guard.disarm();
        Ok(token.map(|token| (granted, token, sent_at)))
    }
}

#[async_trait]
impl Backend for NatsBackend {
    type Handle = NatsHandle;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Acquired<NatsHandle>, LockError> {
        let key = lock_key(req.key);
        let record = Record {
            // The holder's host, pid and label ride after the owner id, which
            // owner checks compare whole.
            owner: req.meta.tag_owner(&random_owner()),
            granted: 0,
            ttl: req.ttl,
        };
        let mut watch = None;
        let mut listening = None;
        // The subscription of this client's last lease of the key, if it
        // ended within a second: no subscription to send for this grant.
        let mut kept = self.markers.kept(&key);
        loop {
            let slot = protocol::read(&self.kv, &self.servers, &key).await?;
            let now = Instant::now();
            let takeover_at = match &slot {
                Slot::Absent | Slot::Released(_) => None,
                Slot::Held {
                    revision, record, ..
                } => {
                    let first = self.sightings.first_seen(&key, *revision, now);
                    Some(first + record.ttl + clock_drift(record.ttl))
                }
            };
            if takeover_at.is_none_or(|at| at <= now) {
                if listening.is_none() {
                    // Sent before the granting write on the same connection,
                    // the subscription is in place on the server before the
                    // grant: every later write to the key reaches it. Without
                    // one, renewals alone tell of a loss.
                    listening = match kept.take() {
                        Some(kept) => Some(kept),
                        None => {
                            let subject = protocol::subject(&self.kv, &key);
                            (self.client.subscribe(subject).await.ok())
                                .map(|subscriber| self.deletions.listen(subscriber))
                        }
                    };
                }
                if let Some((revision, token, sent_at)) = self.grant(&key, &record, &slot).await? {
                    self.sightings.forget(&key);
                    self.markers.replaced(&key);
                    self.sweep.after_grant(&self.kv, &self.servers, &self.epoch);
                    let handle = NatsHandle {
                        key,
                        owner: record.owner,
                        granted: revision,
                        revision: AtomicU64::new(revision),
                        releasing: Arc::default(),
                        listening: Mutex::new(listening),
                    };
                    return Ok(Acquired {
                        handle,
                        token,
                        sent_at,
                    });
                }
                // Someone else wrote first (or the bucket was recreated): look
                // again. The subscription goes: while this acquire waits it
                // would collect the winner's writes, each a read once granted.
                listening = None;
                continue;
            }
            // Held by another: a kept subscription would hear its writes.
            kept = None;
            let deadline = req.wait.instant();
            if deadline.is_some_and(|at| at <= Instant::now()) {
                return Err(req.not_acquired());
            }
            // Subscribe before the next read, so no change after it is missed.
            let Some(changes) = watch.as_mut() else {
                watch = Some(
                    self.kv
                        .watch(&key)
                        .await
                        .map_err(|e| self.servers.unavailable("watching a lock key", &e))?,
                );
                continue;
            };
            let until = match (takeover_at, deadline) {
                (Some(at), Some(deadline)) => Some(at.min(deadline)),
                (at, deadline) => at.or(deadline),
            };
            if !protocol::next_change(changes, until).await {
                watch = None;
            }
        }
    }

    async fn renew(&self, handle: &NatsHandle, ttl: Duration) -> Result<Ownership, LockError> {
        let record = Record {
            owner: handle.owner.clone(),
            granted: handle.granted,
            ttl,
        };
        let mut expected = handle.revision.load(Ordering::Acquire);
        loop {
            match protocol::write(&self.kv, &self.servers, &handle.key, &record, expected).await {
                Written::At(revision) => {
                    handle.revision.store(revision, Ordering::Release);
                    return Ok(Ownership::Held);
                }
                Written::Unknown(e) => return Err(e),
                // A renewal whose reply was lost moved the revision: still ours?
                Written::Conflict => match self.still_mine(handle).await? {
                    Some(revision) if revision != expected => expected = revision,
                    _ => return Ok(Ownership::NotHeld),
                },
            }
        }
    }

    async fn release(&self, handle: &NatsHandle) -> Result<Ownership, LockError> {
        handle.releasing.store(true, Ordering::Release);
        let mut expected = handle.revision.load(Ordering::Acquire);
        loop {
            match self.remove(&handle.key, expected).await {
                Written::At(()) => return Ok(Ownership::Held),
                Written::Unknown(e) => return Err(e),
                Written::Conflict => match self.still_mine(handle).await? {
                    Some(revision) if revision != expected => expected = revision,
                    _ => return Ok(Ownership::NotHeld),
                },
            }
        }
    }

    fn loss_signal(&self, handle: &NatsHandle) -> Option<LossSignal> {
        let listening = handle
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some(signal::loss(
            listening,
            (self.kv.clone(), self.servers.clone(), self.markers.clone()),
            handle.key.clone(),
            (handle.owner.clone(), handle.granted),
            handle.releasing.clone(),
        ))
    }

    async fn holder_changes(&self, key: &LockKey) -> Result<DynLeaderChanges, LockError> {
        signal::changes(&self.kv, &self.servers, &lock_key(key)).await
    }

    fn inspect(&self) -> Option<&dyn Inspect> {
        Some(self)
    }
}
