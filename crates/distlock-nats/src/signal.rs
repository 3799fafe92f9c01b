//! Pushes about one lock key: the loss of a held lock (a record that is not
//! the holder's own grant: an operator's deletion, a takeover), heard on a
//! subscription to the key's subject, and, for election observers, any write
//! to the key (a new leader, a release, a renewal), from a KV watch.

use crate::error::Servers;
use crate::protocol::{self, Record, Slot, granted_at};
use async_nats::jetstream::kv::{Store, Watch};
use async_nats::{Message, Subscriber};
use async_trait::async_trait;
use distlock_core::adapter::{DynLeaderChanges, LeaderChanges, LossSignal};
use distlock_core::{LockError, LossReason};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Completes when the key holds anything but the grant `granted` of `owner`.
/// `listening` is a subscription to the key's subject made before the grant
/// was written, so every later write to the key reaches it: a plain
/// subscription, not a KV watch, which would cost the server a consumer per
/// lease. It sees every publish, the ones JetStream refused too, so anything
/// but the holder's own renewal is checked by reading the key. The holder's
/// own release (`releasing` set first) and a server that cannot be read are
/// left to the renewals, which notice a loss at the latest at the next one.
pub(crate) fn loss(
    mut listening: Subscriber,
    (kv, servers): (Arc<Store>, Servers),
    key: String,
    (owner, granted): (String, u64),
    releasing: Arc<AtomicBool>,
) -> LossSignal {
    Box::pin(async move {
        while let Some(message) = listening.next().await {
            if releasing.load(Ordering::Acquire) {
                break;
            }
            if own_renewal(&message, &owner) {
                continue;
            }
            let still_ours = match protocol::read(&kv, &servers, &key).await {
                Ok(Slot::Held {
                    revision, record, ..
                }) => record.owner == owner && granted_at(revision, &record) == granted,
                Ok(Slot::Absent | Slot::Released(_)) => false,
                Err(_) => true,
            };
            // Our own release may have landed while we read.
            if !still_ours && !releasing.load(Ordering::Acquire) {
                return LossReason::Revoked;
            }
        }
        drop(listening);
        std::future::pending().await
    })
}

/// A record of `owner`'s: the holder's own renewal (a refused one the renewal
/// itself learns of).
fn own_renewal(message: &Message, owner: &str) -> bool {
    let put = message
        .headers
        .as_ref()
        .and_then(|headers| headers.get("KV-Operation"))
        .is_none();
    put && Record::decode(&message.payload).is_some_and(|record| record.owner == owner)
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
