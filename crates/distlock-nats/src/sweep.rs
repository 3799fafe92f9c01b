//! Bounded state: collecting the records nobody will take back.
//!
//! A release leaves a marker, purged a second later (`markers.rs`) unless the
//! same client's next grant of the name replaced it first. What
//! that misses, a crashed holder's record or a marker whose purge failed, the
//! sweep collects: after a grant, at most once per [`SWEEP_EVERY`] per client,
//! it reads the stream information (which also refreshes the token epoch) and
//! then at most [`BATCH`] records onward from where its last sweep stopped
//! (every key but a fenced store's `fence.` records, which belong to their
//! resource), oldest first (a bucket keeps one record per key, so the stream's
//! order is the order of last writes; a live holder's renewals move its record
//! to the end). A lock record left unrenewed for its ttl plus `state_ttl`, a
//! semaphore's or read-write lock's entry left unwritten for its longest
//! member's ttl plus `state_ttl` (every member rewrites the entry when it
//! renews, so its last members crashed), and a marker (of a lock, or of an
//! emptied entry) older than [`MARKER_AGE`], is purged *up to its own sequence*: a
//! holder that renewed or took the name since keeps its newer record, so the
//! purge is conditional on the revision the sweep saw. Ages are measured on
//! the server's clock alone: a record's write time against the stream's last
//! write, which the grant that started the sweep has just made.
//!
//! Tokens do not go back when a record goes: they are stream sequences, and a
//! purge leaves the stream's sequence where it was.

use crate::epoch::EpochCache;
use crate::error::Servers;
use crate::keys::{FENCE_PREFIX, lock_prefix};
use crate::protocol::{self, Epoch, Record};
use crate::share_entry::{Entry, Kind};
use async_nats::jetstream::kv::Store;
use async_nats::jetstream::stream::DirectGetErrorKind;
use distlock_core::LockError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a release marker stays, so that every waiter's watch has been
/// sent it before it goes.
pub(crate) const MARKER_AGE: Duration = Duration::from_secs(1);
/// The shortest time between two sweeps of one client.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The most records one sweep looks at.
const BATCH: usize = 16;

/// One client's sweeps: how long records outlive their leases, when the next
/// sweep may run and the sequence it starts from.
#[derive(Debug)]
pub(crate) struct Sweep {
    state_ttl: Duration,
    next: Mutex<(Instant, u64)>,
}

impl Sweep {
    pub(crate) fn new(state_ttl: Duration) -> Self {
        Sweep {
            state_ttl,
            next: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Starts a sweep in the background if one is due.
    pub(crate) fn after_grant(
        self: &Arc<Self>,
        kv: &Arc<Store>,
        servers: &Servers,
        epoch: &Arc<EpochCache>,
    ) {
        let cursor = {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            if next.0 > Instant::now() {
                return;
            }
            next.0 = Instant::now() + SWEEP_EVERY;
            next.1
        };
        let (sweep, kv, servers, epoch) =
            (self.clone(), kv.clone(), servers.clone(), epoch.clone());
        tokio::spawn(async move {
            match sweep.run(&kv, &servers, &epoch, cursor).await {
                Ok(cursor) => sweep.next.lock().unwrap_or_else(PoisonError::into_inner).1 = cursor,
                Err(e) => tracing::debug!(error = %e, "sweep of idle records failed"),
            }
        });
    }

    /// One sweep from `cursor`; answers where the next one starts.
    async fn run(
        &self,
        kv: &Store,
        servers: &Servers,
        epoch: &EpochCache,
        cursor: u64,
    ) -> Result<u64, LockError> {
        let info = kv
            .stream
            .get_info()
            .await
            .map_err(|e| servers.unavailable("reading the bucket's stream information", &e))?;
        epoch.refresh(Epoch::of(&info));
        let now = info.state.last_timestamp.unix_timestamp_nanos();
        let filter = format!("{}>", kv.prefix);
        let mut cursor = cursor.max(info.state.first_sequence);
        for _ in 0..BATCH {
            let message = match kv
                .stream
                .direct_get_next_for_subject(filter.as_str(), Some(cursor))
                .await
            {
                Ok(message) => message,
                // Past the last record: the next sweep starts from the oldest.
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => return Ok(0),
                Err(e) => return Err(servers.unavailable("reading the oldest records", &e)),
            };
            cursor = message.sequence + 1;
            let age = Duration::from_nanos(
                u64::try_from(now - message.time.unix_timestamp_nanos()).unwrap_or(0),
            );
            let Some(key) = message.subject.strip_prefix(kv.prefix.as_str()) else {
                continue;
            };
            let marker = message.headers.get("KV-Operation").is_some();
            let lifetime = lifetime(key, &message.payload, message.sequence);
            if !key.starts_with(FENCE_PREFIX) && idle(marker, lifetime, age, self.state_ttl) {
                protocol::collect(kv, servers, key, message.sequence).await?;
            }
        }
        Ok(cursor)
    }
}

/// How long after its last write a record of `key` may still be live,
/// when distlock wrote it: a lock record's ttl; for a semaphore's or
/// read-write lock's entry, the longest ttl (or place lifetime) of its
/// members, every one of which rewrites the entry when it renews.
fn lifetime(key: &str, value: &[u8], sequence: u64) -> Option<Duration> {
    if key.starts_with(&lock_prefix("")) {
        return Record::decode(value).map(|record| record.ttl);
    }
    let kind = [Kind::Semaphore, Kind::RwLock]
        .into_iter()
        .find(|kind| key.starts_with(&format!("{}.", kind.word())))?;
    let entry = Entry::decode(value, sequence, kind).ok()?;
    Some(
        entry
            .members
            .iter()
            .map(|m| m.ttl)
            .max()
            .unwrap_or_default(),
    )
}

/// Whether a record `age` old (on the server's clock) is left behind: a
/// release marker older than [`MARKER_AGE`], or a record unwritten for its
/// [`lifetime`] plus `state_ttl` (a crashed lock holder's, or a share entry
/// whose last members crashed). Bytes distlock did not write are left alone.
fn idle(marker: bool, lifetime: Option<Duration>, age: Duration, state_ttl: Duration) -> bool {
    match lifetime {
        _ if marker => age >= MARKER_AGE,
        Some(lifetime) => age > lifetime + state_ttl,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_markers_and_records_idle_past_their_ttl_are_collected() {
        let state_ttl = Duration::from_secs(2);
        let (s, ttl) = (Duration::from_secs, Some(Duration::from_secs(10)));
        assert!(idle(true, None, s(1), state_ttl));
        assert!(!idle(true, None, Duration::from_millis(999), state_ttl));
        assert!(!idle(false, ttl, s(12), state_ttl), "ttl + state_ttl");
        assert!(idle(false, ttl, s(13), state_ttl));
        assert!(!idle(false, None, s(1_000), state_ttl), "not distlock's");
    }

    #[test]
    fn a_record_lives_as_long_as_its_longest_member() {
        let record = Record {
            owner: "o".to_owned(),
            granted: 0,
            ttl: Duration::from_secs(10),
        };
        let lock = lock_prefix("a");
        assert_eq!(
            lifetime(&lock, &record.encode(), 1),
            Some(Duration::from_secs(10))
        );
        let entry = b"v1 sem 2\nHP 0 1500 0 0 a\nHP 1 3000 4 2 b";
        assert_eq!(lifetime("sem.a", entry, 5), Some(Duration::from_secs(3)));
        assert_eq!(lifetime("rw.a", b"v1 rw 0", 5), Some(Duration::ZERO));
        assert_eq!(lifetime("rw.a", entry, 5), None, "a semaphore's value");
        assert_eq!(lifetime("sem.a", b"other bytes", 5), None);
        assert_eq!(lifetime("fence.a", entry, 5), None);
    }
}
