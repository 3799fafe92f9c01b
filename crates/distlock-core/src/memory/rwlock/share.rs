//! A held memory read or write share: renewed and released only while its id
//! is still among the key's live shares.

use crate::backend::{Holding, LossSignal, Ownership};
use crate::memory::MemoryBackend;
use crate::{LockError, LockKey, LossReason};
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
        let network = &self.network;
        network.reach().await?;
        let outcome = network.store.if_share_holder(&self.key, self.id, |rw, id| {
            if let Some(share) = rw.shares.get_mut(&id) {
                share.expires_at = Instant::now() + ttl;
            }
        });
        network.reply().await;
        Ok(outcome)
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        let network = &self.network;
        network.reach().await?;
        let outcome = network.store.if_share_holder(&self.key, self.id, |rw, id| {
            rw.remove(id);
        });
        network.reply().await;
        Ok(outcome)
    }

    fn loss_signal(&self) -> Option<LossSignal> {
        let revoked = self.revoked.clone();
        Some(Box::pin(async move {
            revoked.notified().await;
            LossReason::Revoked
        }))
    }
}
