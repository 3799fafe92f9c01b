//! The read-write lock, in the layout of Apache Curator's
//! `InterProcessReadWriteLock`: readers and writers queue in one directory,
//! `/{namespace}/%rw/{escaped name}`, as ephemeral-sequential nodes
//! `_c_{uuid}-__READ__{seq}` and `_c_{uuid}-__WRIT__{seq}`.
//!
//! Invariant: a writer holds when its node is the first of the queue; a reader
//! holds when no writer's node comes before its own. So requests are served in
//! sequence order and a waiting writer is never overtaken by later readers.
//! Each waiter watches only the node that blocks it (a writer: the node just
//! before its own; a reader: the newest writer before it), so a release wakes
//! only those it unblocks. The token is the node's `czxid`: a writer's is above
//! every earlier share's.

use crate::backend::ZkBackend;
use crate::keys::{self, NodeKind};
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendRwLock, LockQueueRwLock, RwLockInspect, ShareInfo,
};
use distlock_core::{FencingToken, LockError, LockKey, RwMode};
use std::sync::Arc;

/// A read-write lock client for ZooKeeper, on the sessions of a
/// [`crate::ZkLock`] (`lock.rwlock()`).
pub type ZkRwLock = BackendRwLock<ZkRwLockBackend>;

/// The ZooKeeper read-write lock adapter. Its shares are nodes held like the
/// lock's, so renewal, release and the loss signal are the lock's own.
#[derive(Debug)]
pub struct ZkRwLockBackend {
    lock: Arc<ZkBackend>,
}

impl ZkRwLockBackend {
    /// Read-write locks on `lock`'s sessions.
    pub fn new(lock: Arc<ZkBackend>) -> Self {
        ZkRwLockBackend { lock }
    }

    fn dir(&self, name: &str) -> String {
        keys::primitive_dir(&self.lock.namespace, keys::RWLOCKS, name)
    }

    /// The nodes of `key` that hold a share now, in queue order: the first if
    /// it is a writer's, else every reader's before the first writer's; with
    /// the directory, and each node's mode and `czxid`.
    async fn holders(&self, key: &LockKey) -> Result<(String, Vec<Share>), LockError> {
        let session = self.lock.inspector().await?;
        let (dir, requests) = (self.dir(key.as_str()), &self.lock.requests);
        let kinds = NodeKind::Read.queue();
        let queue = requests.list_queue(&session.client, &dir, kinds).await;
        let queue = queue.map_err(|e| self.lock.error(e))?.unwrap_or_default();
        let mut holding = Vec::new();
        for name in queue {
            match NodeKind::of(&name, kinds) {
                Some((NodeKind::Write, _)) if holding.is_empty() => {
                    holding.push(name);
                    break;
                }
                Some((NodeKind::Write, _)) => break,
                _ => holding.push(name),
            }
        }
        let read = requests.children_data(&session.client, &dir, holding).await;
        let shares = (read.map_err(|e| self.lock.error(e))?.into_iter())
            .map(|(name, _, stat)| Share {
                mode: match NodeKind::of(&name, &[NodeKind::Write]) {
                    Some(_) => RwMode::Write,
                    None => RwMode::Read,
                },
                name,
                czxid: stat.czxid,
            })
            .collect();
        Ok((dir, shares))
    }
}

/// One share's node as the server has it.
struct Share {
    mode: RwMode,
    name: String,
    czxid: i64,
}

#[async_trait]
impl LockQueueRwLock for ZkRwLockBackend {
    type Lock = ZkBackend;

    fn lock(&self) -> &Arc<ZkBackend> {
        &self.lock
    }

    async fn queue_up(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<<ZkBackend as Backend>::Handle>, LockError> {
        let kind = match mode {
            RwMode::Read => NodeKind::Read,
            RwMode::Write => NodeKind::Write,
        };
        let dir = self.dir(req.key.as_str());
        self.lock.queue_up(req, dir, kind, Vec::new()).await
    }
}

#[async_trait]
impl RwLockInspect for ZkRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        let (_, shares) = self.holders(key).await?;
        Ok((shares.into_iter())
            .filter_map(|share| {
                Some(ShareInfo::new(
                    share.mode,
                    FencingToken::new(u64::try_from(share.czxid).ok()?),
                    share.name,
                ))
            })
            .collect())
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        let (dir, shares) = self.holders(key).await?;
        let session = self.lock.inspector().await?;
        let mut deleted = 0;
        for share in shares {
            let path = keys::node_path(&dir, &share.name);
            let gone = self.lock.requests.delete_node(&session.client, &path).await;
            if gone.map_err(|e| self.lock.error(e))? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let root = format!("/{}/{}", self.lock.namespace, keys::RWLOCKS);
        self.lock.residue_in(root, prefix, &[]).await
    }
}
