//! Leader election in the layout of Apache Curator's `LeaderLatch`: every
//! candidate owns one ephemeral-sequential node
//! `/{namespace}/%election/{escaped name}/_c_{uuid}-latch-{seq}` holding its
//! proposal (Curator's participant id) as data. The lowest node leads; each
//! other candidate watches only the node just before its own, so a
//! resignation wakes one candidate. That is the lock's queue with another node
//! name, so the protocol is `ZkBackend::queue_up`'s; the term is the leader
//! node's `czxid`, which strictly rises from one leader to the next.

use crate::backend::ZkBackend;
use crate::keys::{self, NodeKind};
use crate::session::Session;
use async_trait::async_trait;
use distlock_core::adapter::{
    Acquired, Backend, Bound, CampaignRequest, DynLeaderChanges, ElectionBackend, LeaderChanges,
};
use distlock_core::toolkit::Holder;
use distlock_core::{Capabilities, FencingToken, LockError, LockKey};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use zookeeper_client as zk;

/// How often `leader` lists again when the leader it found resigned before
/// its node could be read.
const LEADER_READS: usize = 3;

/// Elections on ZooKeeper, interoperable with Curator's `LeaderLatch` on the
/// same path (`/{namespace}/%election/{name}`).
#[derive(Debug)]
pub struct ZkElection {
    lock: Arc<ZkBackend>,
}

impl ZkElection {
    /// Elections on `lock`'s sessions.
    pub fn new(lock: Arc<ZkBackend>) -> Self {
        ZkElection { lock }
    }

    fn dir(&self, name: &str) -> String {
        keys::primitive_dir(&self.lock.namespace, keys::ELECTIONS, name)
    }
}

#[async_trait]
impl ElectionBackend for ZkElection {
    type Leadership = Bound<ZkBackend>;

    fn name(&self) -> &'static str {
        self.lock.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.lock.capabilities()
    }

    async fn campaign(
        &self,
        req: CampaignRequest<'_>,
    ) -> Result<Acquired<Bound<ZkBackend>>, LockError> {
        let dir = self.dir(req.acquire.key.as_str());
        let proposal = req.proposal.as_bytes().to_vec();
        let won = (self.lock)
            .queue_up(req.acquire, dir, NodeKind::Latch, proposal)
            .await?;
        Ok(Bound::acquired(&self.lock, won))
    }

    /// The first latch node's data, as Curator's `LeaderLatch.getLeader`
    /// reports it.
    async fn leader(&self, name: &LockKey) -> Result<Option<Holder>, LockError> {
        let session = self.lock.inspector().await?;
        let (dir, requests) = (self.dir(name.as_str()), &self.lock.requests);
        for _ in 0..LEADER_READS {
            let queue = (requests.list_queue(&session.client, &dir, NodeKind::Latch.queue()))
                .await
                .map_err(|e| self.lock.error(e))?;
            let Some(first) = queue.unwrap_or_default().into_iter().next() else {
                return Ok(None);
            };
            let read = requests.children_data(&session.client, &dir, vec![first]);
            let read = read.await.map_err(|e| self.lock.error(e))?;
            // Empty when the leader resigned between the list and the read.
            if let Some((_, data, stat)) = read.into_iter().next() {
                return Ok(Some(Holder::new(
                    String::from_utf8_lossy(&data).into_owned(),
                    u64::try_from(stat.czxid).ok().map(FencingToken::new),
                    // The leader's session timeout is not on its node.
                    None,
                )));
            }
        }
        Err(LockError::backend(
            "zookeeper",
            format!(
                "the leader of `{name}` changed {LEADER_READS} times while it was being read; ask again"
            ),
        ))
    }

    /// A child watch on the election's directory (an exists watch while it
    /// does not exist): a candidate's node created or deleted, its session's
    /// end included. Set again each time it fires, before the next read.
    async fn leader_changes(&self, name: &LockKey) -> Result<DynLeaderChanges, LockError> {
        let session = self.lock.inspector().await?;
        let dir = self.dir(name.as_str());
        let watch = arm(&self.lock, &session, &dir).await?;
        Ok(Some(Box::new(LatchChanges {
            lock: self.lock.clone(),
            session,
            dir,
            fired: Some(watch),
        })))
    }
}

type Fired = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Sets a one-shot watch that fires at the next change of `dir`'s children,
/// or at its creation while it does not exist.
async fn arm(lock: &ZkBackend, session: &Session, dir: &str) -> Result<Fired, LockError> {
    let (requests, client) = (&lock.requests, &session.client);
    loop {
        let children = requests.watch_children(client, dir).await;
        if let Some((_, watcher)) = children.map_err(|e| lock.error(e))? {
            return Ok(Box::pin(watcher.changed()));
        }
        let (stat, watcher) =
            (requests.watch_exists(client, dir).await).map_err(|e| lock.error(e))?;
        if stat.is_none() {
            return Ok(Box::pin(watcher.changed()));
        }
        // Created between the two requests: watch its children.
    }
}

/// The watch on one election's directory; dropping it removes the watch.
struct LatchChanges {
    lock: Arc<ZkBackend>,
    session: Arc<Session>,
    dir: String,
    /// The armed watch; `None` when setting it again was cut off.
    fired: Option<Fired>,
}

#[async_trait]
impl LeaderChanges for LatchChanges {
    async fn changed(&mut self) -> Result<(), LockError> {
        if self.fired.is_none() {
            self.fired = Some(arm(&self.lock, &self.session, &self.dir).await?);
        }
        let Some(fired) = self.fired.as_mut() else {
            return Ok(());
        };
        let event = fired.await;
        self.fired = None;
        if event.event_type == zk::EventType::Session {
            return Err(LockError::backend(
                "zookeeper",
                format!("the watching session ended ({:?})", event.session_state),
            ));
        }
        self.fired = Some(arm(&self.lock, &self.session, &self.dir).await?);
        Ok(())
    }

    fn announces_arrivals(&self) -> bool {
        true
    }
}
