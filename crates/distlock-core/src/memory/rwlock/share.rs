//! A held memory read or write share: renewed and released only while its id
//! is still among the key's live shares.

use crate::backend::{Holding, LossSignal, Ownership};
use crate::memory::{MemoryBackend, revoked_signal};
use crate::{LockError, LockKey};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A held memory read or write share.
#[derive(Debug)]
pub struct ShareHandle {
    pub(super) network: Arc<MemoryBackend>,
    pub(super) key: LockKey,
    pub(super) id: u64,
    pub(super) revoked: Arc<Notify>,
}

#[async_trait]
impl Holding for ShareHandle {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        (self.network.round_trip(|store| {
            store.if_share_holder(&self.key, self.id, |rw, id| {
                if let Some(share) = rw.live.get_mut(&id) {
                    share.expires_at = Instant::now() + ttl;
                }
            })
        }))
        .await
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        (self.network.round_trip(|store| {
            store.if_share_holder(&self.key, self.id, |rw, id| {
                rw.remove(id);
            })
        }))
        .await
    }

    fn loss_signal(&self) -> Option<LossSignal> {
        Some(revoked_signal(&self.revoked))
    }
}
