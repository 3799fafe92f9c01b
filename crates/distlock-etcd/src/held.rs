//! A held lock: what its handle keeps, and the watch that tells when its key goes.

use crate::error::Context;
use crate::keys::printable;
use crate::lease::Slot;
use crate::watch::{Notice, Subscription, Watches};
use distlock_core::LossReason;
use etcd_client::KvClient;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a held etcd lock keeps: its key, its create revision (the token) and the
/// slot on its client's lease.
pub struct EtcdHandle {
    pub(crate) key: Vec<u8>,
    pub(crate) revision: i64,
    /// The store revision at which the key was seen holding; loss is watched after it.
    pub(crate) confirmed_at: i64,
    pub(crate) slot: Slot,
    pub(crate) releasing: Arc<AtomicBool>,
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

/// Watches a held key for its deletion by anyone but our own release.
pub(crate) struct KeyDeletion {
    pub(crate) kv: KvClient,
    pub(crate) ctx: Context,
    pub(crate) watches: Watches,
    pub(crate) key: Vec<u8>,
    pub(crate) revision: i64,
    pub(crate) from: i64,
    pub(crate) releasing: Arc<AtomicBool>,
    pub(crate) clean: Arc<AtomicBool>,
}

impl KeyDeletion {
    pub(crate) async fn wait(mut self, mut deletion: Subscription) -> LossReason {
        loop {
            match deletion.next().await {
                Notice::Deleted => break,
                Notice::Failed(_) => return std::future::pending().await,
                Notice::Resync => {
                    // History was compacted: read the key instead of its events.
                    let read = self
                        .ctx
                        .retrying("held key read", || {
                            let (mut kv, key) = (self.kv.clone(), self.key.clone());
                            async move { kv.get(key, None).await }
                        })
                        .await;
                    match read {
                        Ok(found)
                            if found
                                .kvs()
                                .first()
                                .is_some_and(|kv| kv.create_revision() == self.revision) =>
                        {
                            self.from = found.header().map_or(self.from, |h| h.revision() + 1);
                        }
                        Ok(_) => break,
                        Err(_) => tokio::time::sleep(self.ctx.request_timeout / 10).await,
                    }
                    deletion = self.watches.deletion(&self.key, self.from);
                }
            }
        }
        self.clean.store(true, Ordering::Release);
        if self.releasing.load(Ordering::Acquire) {
            // Our own release deleted it: that is not a loss.
            return std::future::pending().await;
        }
        LossReason::Revoked
    }
}
