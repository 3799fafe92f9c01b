//! Pushes from a KV watch on one lock key: the loss of a held lock (a record
//! that is not the holder's own grant: an operator's deletion, a takeover)
//! and, for election observers, any write to the key (a new leader, a
//! release, a renewal).

use crate::error::Servers;
use crate::protocol::{Record, granted_at};
use async_nats::jetstream::kv::{Operation, Store, Watch};
use async_trait::async_trait;
use distlock_core::adapter::{DynLeaderChanges, LeaderChanges, LossSignal};
use distlock_core::{LockError, LossReason};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Completes when the key holds anything but the grant `granted` of `owner`.
/// The watch starts from the key's last record, so a change made before it was
/// subscribed is seen too. The holder's own release (`releasing` set first) and
/// a watch that cannot be had or ends are left to the renewals, which notice a
/// loss at the latest at the next renewal.
pub(crate) fn loss(
    kv: Arc<Store>,
    key: String,
    (owner, granted): (String, u64),
    releasing: Arc<AtomicBool>,
) -> LossSignal {
    Box::pin(async move {
        if let Ok(mut watch) = kv.watch_with_history(&key).await {
            while let Some(entry) = watch.next().await {
                let Ok(entry) = entry else { break };
                let ours = entry.operation == Operation::Put
                    && Record::decode(&entry.value).is_some_and(|record| {
                        record.owner == owner && granted_at(entry.revision, &record) == granted
                    });
                if !ours && !releasing.load(Ordering::Acquire) {
                    return LossReason::Revoked;
                }
            }
        }
        std::future::pending().await
    })
}

/// Every write to a lock key from now on, for the observers of an election.
pub(crate) async fn changes(
    kv: &Store,
    servers: &Servers,
    key: &str,
) -> Result<DynLeaderChanges, LockError> {
    let watch = kv
        .watch(key)
        .await
        .map_err(|e| servers.unavailable("watching a lock key", &e))?;
    Ok(Some(Box::new(KeyChanges {
        watch,
        servers: servers.clone(),
    })))
}

struct KeyChanges {
    watch: Watch,
    servers: Servers,
}

#[async_trait]
impl LeaderChanges for KeyChanges {
    async fn changed(&mut self) -> Result<(), LockError> {
        match self.watch.next().await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(self.servers.unavailable("watching a lock key", &e)),
            None => Err(self.servers.unavailable(
                "watching a lock key",
                &std::io::Error::other("the watch ended"),
            )),
        }
    }

    /// A grant is a write to the key, so the watch tells of it.
    fn announces_arrivals(&self) -> bool {
        true
    }
}
