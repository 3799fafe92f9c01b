//! The wire protocol, one function per step. Every step that can grant, keep or
//! end a lock is one compare-and-set on the key's last revision (the
//! `Nats-Expected-Last-Subject-Sequence` header): `update(key, value, 0)` when
//! the key has never been written (or its record was removed by `max_age`),
//! `update(key, value, r)` over a release marker or an expired holder at `r`,
//! `update` again for a renewal and `delete(key, expect r)` for a release. A read
//! only ever decides whether to *try* a write, never whether one was granted, so
//! a stale replica answering a read cannot make two holders.
//!
//! The value is `v1 GRANTED TTL_MS OWNER`: the revision of the write that granted
//! the lock (`0` in that write itself, which cannot know its own revision), the
//! ttl the holder renews within, and its owner id.

use crate::error::{BACKEND, Servers, Written};
use async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{Operation, Store, UpdateErrorKind, Watch};
use async_nats::jetstream::stream::{
    Config as StreamConfig, DiscardPolicy, Info as StreamInfo, StorageType,
};
use async_nats::jetstream::{Context, stream::Stream};
use async_nats::{HeaderMap, HeaderValue};
use bytes::Bytes;
use distlock_core::{FencingToken, LockError};
use futures_util::StreamExt;
use std::time::{Duration, Instant};

/// What a lock key holds, as the protocol wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) owner: String,
    /// The revision of the granting write; `0` when this entry is that write.
    pub(crate) granted: u64,
    pub(crate) ttl: Duration,
}

impl Record {
    pub(crate) fn encode(&self) -> Bytes {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        Bytes::from(format!("v1 {} {ttl_ms} {}", self.granted, self.owner))
    }

    /// `None` for bytes this protocol did not write.
    pub(crate) fn decode(value: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.splitn(4, ' ');
        if parts.next()? != "v1" {
            return None;
        }
        let granted = parts.next()?.parse().ok()?;
        let ttl = Duration::from_millis(parts.next()?.parse().ok()?);
        let owner = parts.next()?.to_owned();
        (!owner.is_empty()).then_some(Record {
            owner,
            granted,
            ttl,
        })
    }
}

/// A lock key as one read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Never written, or its last record aged out of the bucket: create at 0.
    Absent,
    /// A release marker at this revision: take it with a write expecting it.
    Released(u64),
    /// Held (or expired, which only a timed watch can tell) since this revision,
    /// written at this server time (nanoseconds since the Unix epoch), which
    /// only inspection reads: no grant depends on a clock.
    Held {
        revision: u64,
        record: Record,
        written_ns: i128,
    },
}

impl Slot {
    /// The revision a write taking this slot must expect.
    pub(crate) fn revision(&self) -> u64 {
        match self {
            Slot::Absent => 0,
            Slot::Released(revision) | Slot::Held { revision, .. } => *revision,
        }
    }
}

/// The revision a record's lock was granted at, read from the entry at `revision`.
pub(crate) fn granted_at(revision: u64, record: &Record) -> u64 {
    if record.granted == 0 {
        revision
    } else {
        record.granted
    }
}

/// Step: read a lock key.
pub(crate) async fn read(kv: &Store, servers: &Servers, key: &str) -> Result<Slot, LockError> {
    let entry = kv
        .entry(key)
        .await
        .map_err(|e| servers.unavailable("reading a lock key", &e))?;
    Ok(match entry {
        None => Slot::Absent,
        Some(entry) if entry.operation != Operation::Put => Slot::Released(entry.revision),
        Some(entry) => match Record::decode(&entry.value) {
            Some(record) => Slot::Held {
                revision: entry.revision,
                record,
                written_ns: entry.created.unix_timestamp_nanos(),
            },
            None => {
                return Err(servers.refused(
                    "reading a lock key",
                    format_args!(
                        "`{key}` holds a value distlock did not write; keep other data out of \
                         the lock bucket"
                    ),
                ));
            }
        },
    })
}

/// Step: write `record` if the key's last revision is `expected` (`0`: the key
/// has no record). Grants, takeovers and renewals are all this one write.
pub(crate) async fn write(
    kv: &Store,
    servers: &Servers,
    key: &str,
    record: &Record,
    expected: u64,
) -> Written {
    compare_and_set(kv, servers, key, record.encode(), expected).await
}

/// Step: write `value` if the key's last revision is `expected` (`0`: the key
/// has no record); the semaphore's and read-write lock's entries too.
pub(crate) async fn compare_and_set(
    kv: &Store,
    servers: &Servers,
    key: &str,
    value: Bytes,
    expected: u64,
) -> Written {
    match kv.update(key, value, expected).await {
        Ok(revision) => Written::At(revision),
        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Written::Conflict,
        Err(e) => Written::Unknown(servers.unavailable("writing a lock key", &e)),
    }
}

/// Step: put a release marker on the key if its last revision is `expected`,
/// answering the marker's revision. Written by hand rather than with the
/// client's conditional delete, which does not say where the marker landed.
pub(crate) async fn remove(
    js: &Context,
    kv: &Store,
    servers: &Servers,
    key: &str,
    expected: u64,
) -> Written {
    let mut headers = HeaderMap::new();
    headers.insert("KV-Operation", "DEL");
    headers.insert(
        NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
        HeaderValue::from(expected),
    );
    let sent = js
        .publish_with_headers(subject(kv, key), headers, Bytes::new())
        .await;
    match sent {
        Ok(ack) => match ack.await {
            Ok(ack) => Written::At(ack.sequence),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Written::Conflict,
            Err(e) => Written::Unknown(servers.unavailable("releasing a lock key", &e)),
        },
        Err(e) => Written::Unknown(servers.unavailable("releasing a lock key", &e)),
    }
}

/// Step: remove the release marker at `marker` and everything before it on the
/// key, so a name given back leaves nothing. Bounded by the marker's revision, so
/// a holder who took the name since keeps its record.
pub(crate) async fn collect(
    kv: &Store,
    servers: &Servers,
    key: &str,
    marker: u64,
) -> Result<(), LockError> {
    kv.stream
        .purge()
        .filter(subject(kv, key))
        .sequence(marker + 1)
        .await
        .map(|_| ())
        .map_err(|e| servers.unavailable("collecting a release marker", &e))
}

/// The stream subject of a key.
pub(crate) fn subject(kv: &Store, key: &str) -> String {
    format!("{}{key}", kv.prefix)
}

/// Seconds from the Unix epoch to 2024-01-01, where bucket epochs count from.
const EPOCH_BASE: i64 = 1_704_067_200;
/// Low bits of a token: the revision. 2^33 writes to one bucket (renewals
/// included) before it must be recreated; the high 31 bits count seconds from
/// 2024 until 2092.
const REVISION_BITS: u32 = 33;

/// What the bucket's stream says about where tokens come from: the second it was
/// created and its last sequence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epoch {
    pub(crate) created_secs: u64,
    pub(crate) last_sequence: u64,
}

/// Step: read the bucket's stream information.
pub(crate) async fn epoch(stream: &Stream, servers: &Servers) -> Result<Epoch, LockError> {
    let info = stream
        .get_info()
        .await
        .map_err(|e| servers.unavailable("reading the bucket's stream information", &e))?;
    Ok(Epoch::of(&info))
}

impl Epoch {
    /// The epoch a stream information reply gives.
    pub(crate) fn of(info: &StreamInfo) -> Self {
        let since_base = info.created.unix_timestamp().saturating_sub(EPOCH_BASE);
        Epoch {
            created_secs: u64::try_from(since_base).unwrap_or(0),
            last_sequence: info.state.last_sequence,
        }
    }
}

/// The token of a lock granted at `revision` by the stream `epoch` describes,
/// read *after* the grant. A deleted and recreated bucket restarts its sequence
/// at 1 but has a later creation second, so tokens keep rising across it. If
/// the stream's last sequence is below `revision`, the bucket was recreated
/// since the grant (and the lock went with it): no token.
pub(crate) fn token(epoch: Epoch, revision: u64) -> Result<Option<FencingToken>, LockError> {
    if epoch.last_sequence < revision {
        return Ok(None);
    }
    if revision >> REVISION_BITS != 0 || epoch.created_secs >> (64 - REVISION_BITS) != 0 {
        return Err(LockError::backend(
            BACKEND,
            "the lock bucket's stream sequence passed 2^33; delete and recreate the bucket \
             (its tokens start above every earlier one)",
        ));
    }
    Ok(Some(FencingToken::new(
        epoch.created_secs << REVISION_BITS | revision,
    )))
}

/// Step: open the bucket, creating it when it does not exist: the stream a KV
/// bucket is (`KV_<bucket>` over `$KV.<bucket>.>`), on file storage, one record
/// per key, `replicas` copies in a JetStream cluster, no `max_age` (an age limit would remove the record of a lease whose
/// ttl is longer). Created as a stream because the client's own bucket creation
/// first reads the account's limits, whose reply from a 2.9 server it cannot
/// parse.
pub(crate) async fn open_bucket(
    js: &Context,
    servers: &Servers,
    bucket: &str,
    replicas: usize,
) -> Result<Store, LockError> {
    if !(1..=5).contains(&replicas) {
        return Err(LockError::config(
            BACKEND,
            format!("{replicas} bucket replicas: a JetStream stream has 1 to 5"),
        ));
    }
    let version = js.client().server_info().version;
    if let Ok(store) = js.get_key_value(bucket).await {
        let existing = store.stream.cached_info().config.num_replicas;
        crate::replication::check(bucket, existing, &version)?;
        return Ok(store);
    }
    crate::replication::check(bucket, replicas, &version)?;
    let config = StreamConfig {
        name: format!("KV_{bucket}"),
        description: Some("distlock locks".to_owned()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        storage: StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: replicas,
        discard: DiscardPolicy::New,
        ..StreamConfig::default()
    };
    let created = js.get_or_create_stream(config).await;
    // Another client may have created it meanwhile; if not, say why creating failed.
    js.get_key_value(bucket)
        .await
        .map_err(|opened| match created {
            Err(e) => servers.unavailable(
                "creating the lock bucket (is JetStream enabled, `nats-server -js`?)",
                &e,
            ),
            Ok(_) => servers.unavailable("opening the lock bucket", &opened),
        })
}

/// A waiter's pause: until the next change `changes` delivers, or `until`
/// (with none, only a change ends it). `false` when the watch has ended and
/// must be subscribed again.
pub(crate) async fn next_change(changes: &mut Watch, until: Option<Instant>) -> bool {
    let timer = async {
        match until {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        change = changes.next() => change.is_some(),
        () = timer => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_foreign_values() {
        let record = Record {
            owner: "o 1".to_owned(),
            granted: 7,
            ttl: Duration::from_millis(1500),
        };
        assert_eq!(&record.encode()[..], b"v1 7 1500 o 1");
        assert_eq!(Record::decode(&record.encode()), Some(record));
        for bad in [
            &b""[..],
            b"v2 1 1 o",
            b"v1 x 1 o",
            b"v1 1 1 ",
            b"v1 1 1",
            b"\xff",
        ] {
            assert_eq!(Record::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_rise_across_a_recreated_bucket() {
        let old = Epoch {
            created_secs: 100,
            last_sequence: 1_000_000,
        };
        let new = Epoch {
            created_secs: 101,
            last_sequence: 1,
        };
        let before = token(old, 1_000_000).unwrap().unwrap();
        let after = token(new, 1).unwrap().unwrap();
        assert!(after > before);
        assert_eq!(
            token(new, 5).unwrap(),
            None,
            "a revision the stream never reached"
        );
        let full = Epoch {
            created_secs: 100,
            last_sequence: 1 << 33,
        };
        assert!(token(full, 1 << 33).is_err(), "past 33 bits of revision");
    }
}
