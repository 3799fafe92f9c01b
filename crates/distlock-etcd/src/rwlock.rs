//! The read-write lock: the lock's revision queue with read and write markers
//! in the key (`<range>read/<lease>`, `<range>write/<lease>`, under
//! [`crate::rwlock_prefix`]).
//!
//! Invariant: a writer holds when its key is the oldest in the whole range; a
//! reader holds when no write key is older than its own. So requests are served
//! in create-revision order and a waiting writer is never overtaken by later
//! readers. Each waiter watches only the newest key that blocks it (a writer:
//! the key just before its own, of either kind; a reader: the newest older
//! write key), so a release wakes only those it unblocks. The token is the
//! key's create revision, as for the lock: a writer's is above every earlier
//! share's.

use crate::backend::{EtcdBackend, Queue};
use crate::client::KeyValue;
use crate::error::Failure;
use crate::keys::{READ_DIR, WRITE_DIR, printable, rwlock_names_prefix, rwlock_prefix};
use crate::protocol;
use async_trait::async_trait;
use distlock_core::adapter::{
    AcquireRequest, Acquired, Backend, BackendRwLock, LockQueueRwLock, RwLockInspect, ShareInfo,
};
use distlock_core::{FencingToken, LockError, LockKey, RwMode};
use std::sync::Arc;

/// A read-write lock client for etcd, on the connection and leases of an
/// [`crate::EtcdLock`] (`lock.rwlock()`).
pub type EtcdRwLock = BackendRwLock<EtcdRwLockBackend>;

/// The etcd read-write lock adapter. Its shares are the lock's keys and
/// leases, so renewal, release and the loss watch are the lock's own.
#[derive(Debug)]
pub struct EtcdRwLockBackend {
    lock: Arc<EtcdBackend>,
}

impl EtcdRwLockBackend {
    /// Read-write locks on `lock`'s connection.
    pub fn new(lock: Arc<EtcdBackend>) -> Self {
        EtcdRwLockBackend { lock }
    }

    fn error(&self, failure: Failure) -> LockError {
        self.lock.rpc.endpoints.lock_error(failure)
    }

    /// The keys of `key`'s range that hold a share now, in create order: the
    /// oldest key if it is a writer's, else every reader's key older than the
    /// oldest writer's.
    async fn holders(&self, key: &LockKey) -> Result<Vec<(RwMode, KeyValue)>, LockError> {
        let range = rwlock_prefix(self.lock.namespace(), key);
        let keys = protocol::keys_under(&self.lock.rpc, &self.lock.kv, &range)
            .await
            .map_err(|f| self.error(f))?;
        let mut holders = Vec::new();
        for kv in keys {
            let mode = match kv.key().get(range.len()..) {
                Some(rest) if rest.starts_with(WRITE_DIR) => RwMode::Write,
                _ => RwMode::Read,
            };
            match mode {
                RwMode::Write if holders.is_empty() => return Ok(vec![(mode, kv)]),
                RwMode::Write => break,
                RwMode::Read => holders.push((mode, kv)),
            }
        }
        Ok(holders)
    }
}

#[async_trait]
impl LockQueueRwLock for EtcdRwLockBackend {
    type Lock = EtcdBackend;

    fn lock(&self) -> &Arc<EtcdBackend> {
        &self.lock
    }

    async fn queue_up(
        &self,
        req: AcquireRequest<'_>,
        mode: RwMode,
    ) -> Result<Acquired<<EtcdBackend as Backend>::Handle>, LockError> {
        let range = rwlock_prefix(self.lock.namespace(), req.key);
        let reads = [range.as_slice(), READ_DIR].concat();
        let writes = [range.as_slice(), WRITE_DIR].concat();
        let queue = match mode {
            RwMode::Read => Queue {
                all: &range,
                key_dir: &reads,
                blocked_by_writes_under: Some(&writes),
            },
            RwMode::Write => Queue {
                all: &range,
                key_dir: &writes,
                blocked_by_writes_under: None,
            },
        };
        self.lock.queue_up(req, &queue, b"").await
    }
}

#[async_trait]
impl RwLockInspect for EtcdRwLockBackend {
    async fn shares(&self, key: &LockKey) -> Result<Vec<ShareInfo>, LockError> {
        Ok((self.holders(key).await?.into_iter())
            .map(|(mode, kv)| {
                ShareInfo::new(
                    mode,
                    FencingToken::new(kv.create_revision().unsigned_abs()),
                    format!("lease {:x}", kv.lease()),
                )
            })
            .collect())
    }

    async fn delete_shares(&self, key: &LockKey) -> Result<usize, LockError> {
        let mut deleted = 0;
        for (_, kv) in self.holders(key).await? {
            let (rpc, etcd) = (&self.lock.rpc, &self.lock.kv);
            if protocol::delete_found(rpc, etcd, &kv)
                .await
                .map_err(|f| self.error(f))?
            {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let names = rwlock_names_prefix(self.lock.namespace(), prefix);
        let keys = protocol::keys_under(&self.lock.rpc, &self.lock.kv, &names)
            .await
            .map_err(|f| self.error(f))?;
        Ok(keys.iter().map(|kv| printable(kv.key())).collect())
    }
}
