//! The NATS peer: no Rust crate offers a lock on NATS, so the row next to
//! distlock is what a user would write by hand with async-nats' KV calls, one
//! connection per client: `create` (a put expecting no record, which over a
//! delete marker reads the key and writes expecting the marker), a watch on
//! the key while it is held, and `delete_expect_revision` to release. It has
//! no lease: a holder that dies holds the key until someone deletes it.
//!
//! NATS has no request counter a client can read; the table's count is the
//! server's own `in_msgs` from its monitoring port (`/varz`), every message
//! clients sent it.

use async_nats::jetstream::kv::{CreateErrorKind, Operation, Store};
use async_nats::jetstream::stream::{Config as StreamConfig, DiscardPolicy, StorageType};
use distlock_testkit::servers::nats::{varz, varz_count};
use futures_util::StreamExt;
use std::net::SocketAddr;

/// The peer's bucket, apart from distlock's.
const BUCKET: &str = "peers";

/// A client of the hand-written KV lock.
pub struct KvLock {
    kv: Store,
    owner: String,
}

impl KvLock {
    pub async fn connect(url: &str) -> Result<Self, String> {
        let client = async_nats::connect(url)
            .await
            .map_err(|e| format!("nats connect: {e}"))?;
        let kv = async_nats::jetstream::new(client)
            .get_key_value(BUCKET)
            .await
            .map_err(|e| format!("nats bucket: {e}"))?;
        Ok(KvLock {
            kv,
            owner: format!("{:016x}", rand::random::<u64>()),
        })
    }
}

/// Creates the peer's bucket on the server at `url`: the stream a KV bucket
/// is, one record per key (the client's own bucket creation cannot read a
/// 2.9 server's account limits).
pub async fn prepare(url: &str) -> Result<(), String> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| format!("nats connect: {e}"))?;
    let config = StreamConfig {
        name: format!("KV_{BUCKET}"),
        subjects: vec![format!("$KV.{BUCKET}.>")],
        max_messages_per_subject: 1,
        storage: StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        ..StreamConfig::default()
    };
    async_nats::jetstream::new(client)
        .get_or_create_stream(config)
        .await
        .map(drop)
        .map_err(|e| format!("nats bucket: {e}"))
}

impl KvLock {
    /// Takes `name`, waiting on a watch while it is held, calls `held`, and
    /// deletes it expecting the revision it was created at.
    pub async fn turn(
        &mut self,
        name: &str,
        held: &mut (dyn FnMut() + Send),
    ) -> Result<(), String> {
        let revision = loop {
            match self.kv.create(name, self.owner.clone().into()).await {
                Ok(revision) => break revision,
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                    // Held: wait for a delete, from the key's last record on.
                    let mut changes = self
                        .kv
                        .watch_with_history(name)
                        .await
                        .map_err(|e| format!("nats watch: {e}"))?;
                    while let Some(entry) = changes.next().await {
                        let entry = entry.map_err(|e| format!("nats watch: {e}"))?;
                        if entry.operation != Operation::Put {
                            break;
                        }
                    }
                }
                Err(e) => return Err(format!("nats create: {e}")),
            }
        };
        held();
        self.kv
            .delete_expect_revision(name, Some(revision))
            .await
            .map_err(|e| format!("nats delete: {e}"))
    }
}

/// `in_msgs` of the server's `/varz`: every message clients sent it.
pub async fn messages_received(monitor: SocketAddr) -> Option<u64> {
    varz_count(&varz(monitor).await?, "in_msgs")
}
