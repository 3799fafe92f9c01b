//! Leader election in etcd's own layout, the one Go's
//! `client/v3/concurrency.Election` and `etcdctl elect` use: each candidate puts
//! `<prefix>/<lease-id-hex>` with its proposal as the value, attached to its
//! lease; the leader is the key with the lowest create revision, and a candidate
//! waits for the deletion of the key just before it. That is the lock's own
//! queue with a value, so the protocol is `EtcdBackend::queue_up`'s; the term is
//! the leader key's create revision.

use crate::backend::{EtcdBackend, Queue};
use crate::keys::queue_prefix;
use crate::protocol;
use crate::watch::{OnCreate, Subscription};
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, Bound, CampaignRequest, DynLeaderChanges, ElectionBackend, LeaderChanges,
};
use distlock_core::toolkit::Holder;
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use std::sync::Arc;

/// Elections on etcd, interoperable with `etcdctl elect` and Go services using
/// `concurrency.Election` on the same prefix (the namespace plus the name).
#[derive(Debug)]
pub struct EtcdElection {
    backend: Arc<EtcdBackend>,
}

impl EtcdElection {
    /// Elections over `backend`'s connection and leases.
    pub fn new(backend: Arc<EtcdBackend>) -> Self {
        EtcdElection { backend }
    }
}

#[async_trait]
impl ElectionBackend for EtcdElection {
    type Leadership = Bound<EtcdBackend>;

    fn name(&self) -> &'static str {
        crate::error::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        distlock_core::adapter::Backend::capabilities(&*self.backend)
    }

    async fn campaign(
        &self,
        req: CampaignRequest<'_>,
    ) -> Result<Acquired<Bound<EtcdBackend>>, LockError> {
        let prefix = queue_prefix(&self.backend.namespace, req.acquire.key);
        let won = self
            .backend
            .queue_up(req.acquire, &Queue::plain(&prefix), req.proposal.as_bytes())
            .await?;
        Ok(Bound::acquired(&self.backend, won))
    }

    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError> {
        let backend = &self.backend;
        let queue = queue_prefix(&backend.namespace, name);
        let found = protocol::leader(&backend.rpc, &backend.kv, &queue).await;
        let Some(oldest) = found.map_err(|f| backend.rpc.endpoints.lock_error(f))? else {
            return Ok(None);
        };
        Ok(Some(Holder::new(
            // The leader's proposal, as Go's `Election.Leader` reports it.
            String::from_utf8_lossy(oldest.value()).into_owned(),
            Some(FencingToken::new(oldest.create_revision().unsigned_abs())),
            self.backend.lease_remaining(oldest.lease()).await?,
        )))
    }

    /// A watch for deletions under the election's prefix: a resignation, a
    /// candidate's lease expiring (etcd deletes its key), a withdrawn
    /// candidacy. A new key is not watched for, so a vacant election is polled.
    async fn leader_changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError> {
        let queue = queue_prefix(&self.backend.namespace, name);
        let watch = self.backend.watches.deletions_under(&queue);
        Ok(Some(Box::new(Departures(watch))))
    }
}

/// The deletions under one election's prefix.
struct Departures(Subscription);

#[async_trait]
impl LeaderChanges for Departures {
    async fn changed(&mut self) -> Result<(), LockError> {
        // Nothing was read at a known revision: every wake-up is news, the
        // watch's creation included.
        (self.0.wake(0, OnCreate::Reread).await)
            .map(drop)
            .map_err(|reason| LockError::backend(crate::error::BACKEND, reason))
    }
}
