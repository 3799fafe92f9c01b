//! What a release leaves for a second: the release markers one client wrote
//! and has yet to purge, collected by one task of the client's own while there
//! are any, so a release costs no task and no timer of its own; and the loss
//! subscriptions of the leases it ended, kept for a next grant of the same key
//! ([`KEPT`] at most, each until [`MARKER_AGE`] old), which then sends no
//! subscription of its own. A bucket keeps one record per key, so a marker that this client's
//! next grant of the name replaced is gone already and is not purged.

use crate::error::Servers;
use crate::listening::Listening;
use crate::protocol;
use crate::sweep::MARKER_AGE;
use async_nats::jetstream::kv::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The most loss subscriptions kept after their leases ended: each hears
/// the other clients' writes to its key until it goes.
const KEPT: usize = 8;

/// One client's markers waiting for their purge, and its kept subscriptions.
#[derive(Debug)]
pub(crate) struct Markers {
    kv: Arc<Store>,
    servers: Servers,
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    /// By key: the marker's revision, and when its write was answered.
    markers: HashMap<String, (u64, Instant)>,
    /// Loss subscriptions by key, oldest first, and when their lease ended.
    kept: Vec<(String, Listening, Instant)>,
    /// Whether the collecting task runs.
    collecting: bool,
}

impl Markers {
    pub(crate) fn new(kv: Arc<Store>, servers: Servers) -> Arc<Self> {
        Arc::new(Markers {
            kv,
            servers,
            pending: Mutex::default(),
        })
    }

    /// Purges the release marker at `marker` once [`MARKER_AGE`] has passed
    /// (every waiter's watch has been sent it by then), unless this client
    /// granted the key again meanwhile; a failure leaves it to a later sweep.
    pub(crate) fn collect_later(self: &Arc<Self>, key: String, marker: u64) {
        let mut pending = self.pending();
        pending.markers.insert(key, (marker, Instant::now()));
        self.run(&mut pending);
    }

    /// Keeps the loss subscription of a lease that ended, for this client's
    /// next grant of `key` (the oldest kept goes when there are [`KEPT`]).
    /// Without a runtime to drop it later, it goes at once.
    pub(crate) fn keep(self: &Arc<Self>, key: String, listening: Listening) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let mut pending = self.pending();
        let gone = (pending.kept.len() >= KEPT).then(|| pending.kept.remove(0));
        pending.kept.push((key, listening, Instant::now()));
        self.run(&mut pending);
        drop(pending);
        drop(gone);
    }

    /// The subscription kept for `key`, if any, ready for a new grant.
    pub(crate) fn kept(&self, key: &str) -> Option<Listening> {
        let mut pending = self.pending();
        let at = pending.kept.iter().position(|(k, ..)| k == key)?;
        let (_, listening, _) = pending.kept.remove(at);
        drop(pending);
        listening.fresh()
    }

    /// Starts the collecting task if there is work for it and it is not running.
    fn run(self: &Arc<Self>, pending: &mut Pending) {
        let idle = pending.markers.is_empty() && pending.kept.is_empty();
        if !idle && !std::mem::replace(&mut pending.collecting, true) {
            tokio::spawn(collect(self.clone()));
        }
    }

    /// This client granted `key`: the grant's record replaced its marker.
    pub(crate) fn replaced(&self, key: &str) {
        self.pending().markers.remove(key);
    }

    /// Takes the markers at least [`MARKER_AGE`] old and drops the kept
    /// subscriptions as old; `None`, and the task ends, when there is
    /// nothing left at all.
    fn due(&self) -> Option<Vec<(String, u64)>> {
        let mut pending = self.pending();
        if pending.markers.is_empty() && pending.kept.is_empty() {
            pending.collecting = false;
            return None;
        }
        let due: Vec<(String, u64)> = pending
            .markers
            .iter()
            .filter(|(_, (_, at))| at.elapsed() >= MARKER_AGE)
            .map(|(key, (marker, _))| (key.clone(), *marker))
            .collect();
        for (key, _) in &due {
            pending.markers.remove(key);
        }
        let fresh = pending
            .kept
            .iter()
            .position(|(.., at)| at.elapsed() < MARKER_AGE)
            .unwrap_or(pending.kept.len());
        let old: Vec<_> = pending.kept.drain(..fresh).collect();
        drop(pending);
        drop(old);
        Some(due)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The collecting task: every [`MARKER_AGE`], purges the markers at least
/// that old and drops the kept subscriptions as old, until none is left.
async fn collect(markers: Arc<Markers>) {
    loop {
        tokio::time::sleep(MARKER_AGE).await;
        let Some(due) = markers.due() else {
            return;
        };
        for (key, marker) in due {
            let purged = protocol::collect(&markers.kv, &markers.servers, &key, marker).await;
            if let Err(e) = purged {
                tracing::debug!(key, error = %e, "release marker left for a later sweep");
            }
        }
    }
}
