//! The release markers one client wrote and has yet to purge, collected by
//! one task of the client's own while there are any: a release costs no task
//! and no timer of its own. A bucket keeps one record per key, so a marker
//! that this client's next grant of the name replaced is gone already and is
//! not purged.

use crate::error::Servers;
use crate::protocol;
use crate::sweep::MARKER_AGE;
use async_nats::jetstream::kv::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// One client's markers waiting for their purge.
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
        if !std::mem::replace(&mut pending.collecting, true) {
            tokio::spawn(collect(self.clone()));
        }
    }

    /// This client granted `key`: the grant's record replaced its marker.
    pub(crate) fn replaced(&self, key: &str) {
        self.pending().markers.remove(key);
    }

    /// Takes the markers at least [`MARKER_AGE`] old; `None`, and the task
    /// ends, when there is none left at all.
    fn due(&self) -> Option<Vec<(String, u64)>> {
        let mut pending = self.pending();
        if pending.markers.is_empty() {
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
        Some(due)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The collecting task: every [`MARKER_AGE`], purges the markers at least
/// that old, until none is left.
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
