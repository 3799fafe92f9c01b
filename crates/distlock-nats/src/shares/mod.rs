//! The semaphore and the read-write lock on NATS KV, written once for both.
//!
//! KV has no multi-key transaction, so the whole state of one name lives in
//! ONE entry, `sem.<escaped name>` or `rw.<escaped name>` (its value:
//! [`share_entry`](crate::share_entry)), and every change to it (a grant, a renewal, a release, a
//! queued place, the removal of an expired member) is one compare-and-set on
//! the entry's last revision: `update(key, value, revision read)`, or the
//! revision-conditional delete of an entry left with no member (collected a
//! second later, as a released lock's marker is). Two writers from the same
//! state can never both succeed; the loser reads again.
//!
//! Invariant: a member is live from the write that added it until its owner
//! removes it or a contender removes it after seeing its renewal count
//! unchanged for its ttl plus drift on the contender's own monotonic clock
//! ([`contend`]), the lock's expiry rule applied member by member. A
//! holder's token is the revision of the write that granted it, composed with
//! the bucket's creation second as the lock's token is.

use crate::backend::NatsBackend;
use crate::error::Written;
use crate::keys::escape;
use crate::protocol;
use crate::share_entry::{Entry, Kind, Member};
use async_nats::jetstream::kv::Operation;
use async_trait::async_trait;
use distlock_core::adapter::{Holding, Ownership};
use distlock_core::toolkit::UndoFuture;
use distlock_core::{FencingToken, LockError, LockKey};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod contend;
mod inspect;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

/// One name's entry of one primitive, on the lock's bucket.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    backend: Arc<NatsBackend>,
    kind: Kind,
    key: String,
}

/// An entry as one read found it: the revision a write over it must expect
/// (`0`: none) and its members.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) revision: u64,
    pub(crate) entry: Entry,
}

impl Place {
    pub(crate) fn new(backend: Arc<NatsBackend>, kind: Kind, name: &LockKey) -> Place {
        let key = format!("{}.{}", kind.word(), escape(name.as_str()));
        Place { backend, kind, key }
    }

    /// Step: read the entry.
    pub(crate) async fn read(&self) -> Result<Read, LockError> {
        let b = &self.backend;
        let found = b.kv.entry(&self.key).await;
        let found = found.map_err(|e| b.servers.unavailable("reading a share entry", &e))?;
        let Some(found) = found else {
            return Ok(Read {
                revision: 0,
                entry: Entry::empty(self.kind),
            });
        };
        let entry = match found.operation {
            Operation::Put => {
                Entry::decode(&found.value, found.revision, self.kind).map_err(|why| {
                    b.servers.refused(
                        "reading a share entry",
                        format_args!(
                            "`{}` holds a value distlock did not write ({why}); keep other \
                             data out of the lock bucket",
                            self.key
                        ),
                    )
                })?
            }
            _ => Entry::empty(self.kind),
        };
        Ok(Read {
            revision: found.revision,
            entry,
        })
    }

    /// Step: replace the entry read at `revision` by `entry`, or delete it
    /// (revision-conditional, collected later) when `entry` has no member.
    pub(crate) async fn write(&self, entry: &Entry, revision: u64) -> Written {
        let b = &self.backend;
        if !entry.members.is_empty() {
            return protocol::compare_and_set(
                &b.kv,
                &b.servers,
                &self.key,
                entry.encode(),
                revision,
            )
            .await;
        }
        if revision == 0 {
            return Written::At(0);
        }
        match b.remove(&self.key, revision).await {
            Written::At(()) => Written::At(revision),
            Written::Conflict => Written::Conflict,
            Written::Unknown(e) => Written::Unknown(e),
        }
    }

    /// The token of a grant at `revision`, or `None` when the bucket was
    /// recreated since (the grant went with it).
    pub(crate) async fn token(&self, revision: u64) -> Result<Option<FencingToken>, LockError> {
        let b = &self.backend;
        let epoch = protocol::epoch(&b.kv.stream, &b.servers).await?;
        protocol::token(epoch, revision)
    }

    /// Removes the members `pick` chooses, by compare-and-set until it
    /// applies; how many there were.
    pub(crate) async fn remove_where(
        &self,
        pick: impl Fn(&Member) -> bool,
    ) -> Result<usize, LockError> {
        loop {
            let Read {
                revision,
                mut entry,
            } = self.read().await?;
            let before = entry.members.len();
            entry.members.retain(|m| !pick(m));
            let removed = before - entry.members.len();
            if removed == 0 {
                return Ok(0);
            }
            match self.write(&entry, revision).await {
                Written::At(_) => return Ok(removed),
                Written::Conflict => {}
                Written::Unknown(e) => return Err(e),
            }
        }
    }

    /// Gives back whatever `owner` holds or waits for, in the background: the
    /// undo of an acquire that ended without a grant.
    pub(crate) fn undo(&self, owner: String) -> UndoFuture {
        let place = self.clone();
        Box::pin(async move {
            if let Err(e) = place.remove_where(|m| m.owner == owner).await {
                tracing::debug!(key = place.key, error = %e, "undoing a share attempt failed; its ttl frees it");
            }
        })
    }
}

/// One held permit or read-write share: its entry, owner and grant, and the
/// revision of its last write (a read older than that is a stale replica's).
#[derive(Debug)]
pub struct NatsShare {
    place: Place,
    owner: String,
    granted: u64,
    last: AtomicU64,
}

impl NatsShare {
    pub(crate) fn new(place: Place, owner: String, granted: u64) -> NatsShare {
        NatsShare {
            place,
            owner,
            granted,
            last: AtomicU64::new(granted),
        }
    }

    fn is_me(&self, m: &Member) -> bool {
        m.holds && m.owner == self.owner && m.granted == self.granted
    }

    /// Reads the entry until the read is at least as new as this share's
    /// last write: a replica behind it could not show the share.
    async fn read_fresh(&self) -> Result<Read, LockError> {
        let mut tries = 0;
        loop {
            let read = self.place.read().await?;
            if read.revision >= self.last.load(Ordering::Acquire) || tries == 20 {
                return Ok(read);
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One owner-checked change of this share, by compare-and-set until it
    /// applies: `change` gets the share's member in the entry.
    async fn change(&self, change: impl Fn(&mut Entry, usize)) -> Result<Ownership, LockError> {
        loop {
            let Read {
                revision,
                mut entry,
            } = self.read_fresh().await?;
            let Some(at) = entry.members.iter().position(|m| self.is_me(m)) else {
                return Ok(Ownership::NotHeld);
            };
            change(&mut entry, at);
            match self.place.write(&entry, revision).await {
                Written::At(revision) => {
                    self.last.fetch_max(revision, Ordering::AcqRel);
                    return Ok(Ownership::Held);
                }
                // Another member wrote meanwhile: read again.
                Written::Conflict => {}
                Written::Unknown(e) => return Err(e),
            }
        }
    }
}

#[async_trait]
impl Holding for NatsShare {
    fn backend_name(&self) -> &'static str {
        crate::error::BACKEND
    }

    async fn renew(&self, ttl: Duration) -> Result<Ownership, LockError> {
        self.change(|entry, at| {
            let me = &mut entry.members[at];
            me.ttl = ttl;
            me.renews += 1;
        })
        .await
    }

    async fn release(&self) -> Result<Ownership, LockError> {
        self.change(|entry, at| {
            entry.members.remove(at);
        })
        .await
    }
}
