//! Pushes about one lock key: the loss of a held lock (a record that is not
//! the holder's own grant: an operator's deletion, a takeover), heard on a
//! subscription to the key's subject (or, for this client's own deletions,
//! from [`crate::listening::Deletions`]), and, for election observers, any write
//! to the key (a new leader, a release, a renewal), from a KV watch.

use crate::error::Servers;
use crate::listening::{Heard, Listening};
use crate::markers::Markers;
use crate::protocol::{self, Record, Slot, granted_at};
use async_nats::Message;
use async_nats::jetstream::kv::{Store, Watch};
use async_trait::async_trait;
use distlock_core::adapter::{DynLeaderChanges, LeaderChanges, LossSignal};
use distlock_core::{LockError, LossReason};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Completes when the key holds anything but the grant `granted` of `owner`.
/// `listening` was set up before the grant was written, so every later write
/// to the key reaches it: other clients' writes through a plain subscription
/// to the key's subject (not a KV watch, which would cost the server a
/// consumer per lease), this client's own deletions through
/// [`crate::listening::Deletions`]. The subscription sees every publish, the
/// ones JetStream refused too, so anything but the holder's own renewal (sent
/// only to a client that echoes) is checked by reading the key. The holder's
/// own release (`releasing` set first) and a server that cannot be read are
/// left to the renewals, which notice a loss at the latest at the next one.
/// When the lease ends, the subscription goes back to `markers` for this
/// client's next grant of the key, unless this signal found the key taken.
pub(crate) fn loss(
    listening: Listening,
    (kv, servers, markers): (Arc<Store>, Servers, Arc<Markers>),
    key: String,
    (owner, granted): (String, u64),
    releasing: Arc<AtomicBool>,
) -> LossSignal {
    let mut lent = Lent {
        listening: Some(listening),
        key,
        markers,
    };
    Box::pin(async move {
        while let Some(listening) = lent.listening.as_mut() {
            match listening.heard().await {
                Heard::Write(message) if own_renewal(&message, &owner) => continue,
                Heard::Write(_) | Heard::Deletion => {}
                Heard::Ended => {
                    drop(lent.listening.take());
                    break;
                }
            }
            if releasing.load(Ordering::Acquire) {
                break;
            }
            // Boxed: kept inline, the read would make every lease's signal
            // (allocated at its start) as large, heard of or not.
            let still_ours = match Box::pin(protocol::read(&kv, &servers, &lent.key)).await {
                Ok(Slot::Held {
                    revision, record, ..
                }) => record.owner == owner && granted_at(revision, &record) == granted,
                Ok(Slot::Absent | Slot::Released(_)) => false,
                Err(_) => true,
            };
            // Our own release may have landed while we read.
            if !still_ours && !releasing.load(Ordering::Acquire) {
                // Someone else's key now: its subscription would hear them.
                drop(lent.listening.take());
                return LossReason::Revoked;
            }
        }
        std::future::pending().await
    })
}

/// A lease's [`Listening`], kept for the key's next grant when the loss
/// signal is dropped with it: when the lease ends.
struct Lent {
    listening: Option<Listening>,
    key: String,
    markers: Arc<Markers>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(listening) = self.listening.take() {
            self.markers.keep(std::mem::take(&mut self.key), listening);
        }
    }
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
