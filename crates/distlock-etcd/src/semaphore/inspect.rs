//! What an operator (and the conformance suite) can ask about semaphores: the
//! permits are the `slots/` keys, a forced release deletes one (its holder's
//! loss watch fires, the first waiter's slot watch wakes it), and residue is
//! every queue and permit key under a name prefix. The `limit` keys the
//! previous release left are not residue: they are deleted when the name is
//! used again (docs/upgrading.md has the command for the others).

use super::EtcdSemaphoreBackend;
use super::protocol;
use crate::error::Failure;
use crate::keys::{LIMIT_KEY, printable, semaphore_names_prefix};
use async_trait::async_trait;
use distlock_core::adapter::{PermitInfo, SemaphoreInspect};
use distlock_core::{FencingToken, LockError, LockKey};

impl EtcdSemaphoreBackend {
    fn error(&self, failure: Failure) -> LockError {
        self.lock.rpc.endpoints.lock_error(failure)
    }
}

#[async_trait]
impl SemaphoreInspect for EtcdSemaphoreBackend {
    async fn permits(&self, key: &LockKey) -> Result<Vec<PermitInfo>, LockError> {
        let layout = self.layout(key);
        let (rpc, kv) = (&self.lock.rpc, &self.lock.kv);
        let mut permits: Vec<PermitInfo> = protocol::permits(rpc, kv, &layout)
            .await
            .map_err(|f| self.error(f))?
            .into_iter()
            .map(|(slot, kv)| {
                PermitInfo::new(
                    slot,
                    FencingToken::new(kv.create_revision().unsigned_abs()),
                    format!("lease {:x}", kv.lease()),
                )
            })
            .collect();
        permits.sort_by_key(|p| p.slot);
        Ok(permits)
    }

    async fn delete_permit(&self, key: &LockKey, slot: u32) -> Result<bool, LockError> {
        let layout = self.layout(key);
        let (rpc, kv) = (&self.lock.rpc, &self.lock.kv);
        let found = protocol::permits(rpc, kv, &layout)
            .await
            .map_err(|f| self.error(f))?;
        let Some((_, permit)) = found.into_iter().find(|(n, _)| *n == slot) else {
            return Ok(false);
        };
        // By create revision: a permit released and claimed again meanwhile is
        // another holder's, not the one the operator saw.
        crate::protocol::delete_found(rpc, kv, &permit)
            .await
            .map_err(|f| self.error(f))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let names = semaphore_names_prefix(self.lock.namespace(), prefix);
        let keys = crate::protocol::keys_under(&self.lock.rpc, &self.lock.kv, &names)
            .await
            .map_err(|f| self.error(f))?;
        Ok(keys
            .iter()
            // An escaped name has no `/`, so only an old limit key ends in `/limit`.
            .filter(|kv| !kv.key().ends_with(&[b"/", LIMIT_KEY].concat()))
            .map(|kv| format!("{}: lease {:x}", printable(kv.key()), kv.lease()))
            .collect())
    }
}
