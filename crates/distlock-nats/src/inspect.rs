//! What an operator (and `distlock check`, `status`, `unlock --force`) sees of
//! the bucket, over the same key layout as the protocol.

use crate::backend::NatsBackend;
use crate::error::Written;
use crate::keys::{escape as escape_name, lock_key, lock_name, lock_prefix};
use crate::protocol::{self, Record, Slot};
use async_nats::jetstream::stream::StorageType;
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect, random_owner};
use distlock_core::{HolderMeta, LockError, LockKey};
use futures_util::TryStreamExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

impl NatsBackend {
    /// The keys of `kind` (`lock`, `sem`, `rw`) starting with `wanted` the
    /// stream holds a record for (a live entry or a release marker not
    /// collected yet), listed by the stream itself.
    pub(crate) async fn keys_under(
        &self,
        kind: &str,
        wanted: &str,
    ) -> Result<Vec<String>, LockError> {
        let stream_prefix = &self.kv.prefix;
        let subjects: Vec<(String, usize)> = self
            .kv
            .stream
            .info_with_subjects(format!("{stream_prefix}{kind}.>"))
            .await
            .map_err(|e| self.servers.unavailable("listing the bucket's keys", &e))?
            .try_collect()
            .await
            .map_err(|e| self.servers.unavailable("listing the bucket's keys", &e))?;
        let mut keys: Vec<String> = subjects
            .into_iter()
            .filter_map(|(subject, _)| {
                subject
                    .strip_prefix(stream_prefix.as_str())
                    .map(str::to_owned)
            })
            .filter(|key| key.starts_with(wanted))
            .collect();
        keys.sort();
        Ok(keys)
    }
}

#[async_trait]
impl Inspect for NatsBackend {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let Slot::Held {
            revision,
            record,
            written_ns,
        } = protocol::read(&self.kv, &self.servers, &lock_key(key)).await?
        else {
            return Ok(None);
        };
        // Expiry as an observer sees it: the record's server time against this
        // machine's wall clock. Only reports use it; a grant never does.
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i128::try_from(since.as_nanos()).unwrap_or(i128::MAX)
            });
        let age = u64::try_from(now_ns.saturating_sub(written_ns)).unwrap_or(0);
        let Some(expires_in) = record.ttl.checked_sub(Duration::from_nanos(age)) else {
            return Ok(None);
        };
        let epoch = protocol::epoch(&self.kv.stream, &self.servers).await?;
        let token = protocol::token(epoch, protocol::granted_at(revision, &record))?;
        let (owner, meta) = HolderMeta::split_owner(&record.owner);
        let holder = Holder::new(owner.to_owned(), token, Some(expires_in));
        Ok(Some(holder.with_meta(meta)))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let mut held = Vec::new();
        for key in self.keys_under("lock", &lock_prefix(prefix)).await? {
            if let Slot::Held {
                revision, record, ..
            } = protocol::read(&self.kv, &self.servers, &key).await?
            {
                let name = lock_name(&key).unwrap_or_else(|| key.clone());
                held.push(format!(
                    "{name}: owner {}, revision {revision}",
                    record.owner
                ));
            }
        }
        Ok(held)
    }

    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let mut records = 0;
        for kind in ["lock", "sem", "rw"] {
            let wanted = format!("{kind}.{}", escape_name(prefix));
            records += self.keys_under(kind, &wanted).await?.len();
        }
        Ok(Some(records))
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let key = lock_key(key);
        loop {
            let Slot::Held { revision, .. } = protocol::read(&self.kv, &self.servers, &key).await?
            else {
                return Ok(false);
            };
            match self.remove(&key, revision).await {
                Written::At(()) => {
                    self.deletions.deleted();
                    return Ok(true);
                }
                // Renewed or taken over meanwhile: delete whoever holds it now.
                Written::Conflict => {}
                Written::Unknown(e) => return Err(e),
            }
        }
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let info = self.kv.stream.get_info().await.map_err(|e| {
            self.servers
                .unavailable("reading the bucket's configuration", &e)
        })?;
        let mut pitfalls = Vec::new();
        if info.config.storage == StorageType::Memory {
            pitfalls.push(format!(
                "bucket `{}` is on memory storage: a server restart forgets every held lock \
                 (tokens still rise, from the recreated bucket's creation time); use file storage",
                self.kv.name
            ));
        }
        if !info.config.max_age.is_zero() {
            pitfalls.push(format!(
                "bucket `{}` removes records {:?} after their last write: a lease with a longer \
                 ttl and manual renewal can vanish while held; create the bucket without max_age",
                self.kv.name, info.config.max_age
            ));
        }
        if info.config.max_messages_per_subject != 1 {
            pitfalls.push(format!(
                "bucket `{}` keeps {} records per key; distlock needs one (history 1)",
                self.kv.name, info.config.max_messages_per_subject
            ));
        }
        Ok(pitfalls)
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some("STREAM.INFO")
    }

    async fn ping(&self) -> Result<(), LockError> {
        protocol::epoch(&self.kv.stream, &self.servers)
            .await
            .map(|_| ())
    }

    fn floor(&self) -> Option<Floor> {
        Some(Floor {
            name: "read + compare-and-set put + release marker",
            requests: 3,
        })
    }

    /// A lock cycle's writes with nothing around them: the read that learns
    /// the revision to expect, the granting write, and the release marker
    /// (collected later, as a release's is). No watch, no token, no sweep.
    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let busy = || LockError::Busy {
            key: key.clone(),
            holder: None,
        };
        let name = lock_key(key);
        let slot = protocol::read(&self.kv, &self.servers, &name).await?;
        if matches!(slot, Slot::Held { .. }) {
            return Err(busy());
        }
        let record = Record {
            owner: random_owner(),
            granted: 0,
            ttl,
        };
        let expected = slot.revision();
        let revision =
            match protocol::write(&self.kv, &self.servers, &name, &record, expected).await {
                Written::At(revision) => revision,
                Written::Conflict => return Err(busy()),
                Written::Unknown(e) => return Err(e),
            };
        match self.remove(&name, revision).await {
            Written::At(()) => Ok(()),
            Written::Conflict => Err(busy()),
            Written::Unknown(e) => Err(e),
        }
    }
}
