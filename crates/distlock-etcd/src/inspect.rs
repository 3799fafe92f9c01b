//! What an operator (and the conformance suite's fault hooks) can ask of etcd
//! about the locks: the holder is the oldest key of a lock's queue, residue is
//! every key under the names' prefix, a forced unlock deletes the holder's key
//! (which wakes the next waiter's watch), a linearizable `Get` is the raw
//! round trip, and the floor of a cycle is the put-if-absent and delete the
//! protocol cannot do without.

use crate::backend::EtcdBackend;
use crate::client::KeyValue;
use crate::error::Failure;
use crate::etcd_lease::whole_seconds;
use crate::keys::{
    contender_key, names_prefix, printable, queue_prefix, rwlock_names_prefix,
    semaphore_names_prefix,
};
use crate::{protocol, requests};
use async_trait::async_trait;
use distlock_core::toolkit::{Floor, Holder, Inspect};
use distlock_core::{FencingToken, HolderMeta, LockError, LockKey};
use prost::bytes::Bytes;
use std::time::Duration;

/// A key inside the namespace that no lock uses (queues end in `/`), read by
/// [`Inspect::ping`]: within the namespace so a user allowed only its range may
/// read it.
const PING_KEY: &str = "distlock-ping";

impl EtcdBackend {
    fn lock_error(&self, failure: Failure) -> LockError {
        self.rpc.endpoints.lock_error(failure)
    }

    /// `key`'s queue and its holder's key, if any.
    async fn holder_key(&self, key: &LockKey) -> Result<(Vec<u8>, Option<KeyValue>), LockError> {
        let queue = queue_prefix(&self.namespace, key);
        let oldest = protocol::leader(&self.rpc, &self.kv, &queue)
            .await
            .map_err(|f| self.lock_error(f))?;
        Ok((queue, oldest))
    }

    /// How long the lease `id` lives if nobody keeps it alive; `None` for a key
    /// without a lease or a lease already gone.
    pub(crate) async fn lease_remaining(&self, id: i64) -> Result<Option<Duration>, LockError> {
        if id == 0 {
            return Ok(None);
        }
        let lease = self.client.lease_client();
        let found = self
            .rpc
            .retrying("lease time-to-live", || {
                let lease = lease.clone();
                async move { lease.time_to_live(id).await }
            })
            .await
            .map_err(|f| self.lock_error(f))?;
        Ok(u64::try_from(found.ttl()).ok().map(Duration::from_secs))
    }
}

#[async_trait]
impl Inspect for EtcdBackend {
    async fn holder(&self, key: &LockKey) -> Result<Option<Holder>, LockError> {
        let (queue, Some(oldest)) = self.holder_key(key).await? else {
            return Ok(None);
        };
        Ok(Some(
            Holder::new(
                // The contender's name in the queue: its lease id in hex.
                printable(oldest.key().get(queue.len()..).unwrap_or_default()),
                Some(FencingToken::new(oldest.create_revision().unsigned_abs())),
                self.lease_remaining(oldest.lease()).await?,
            )
            .with_meta(HolderMeta::decode(&String::from_utf8_lossy(oldest.value()))),
        ))
    }

    async fn residue(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let keys =
            protocol::keys_under(&self.rpc, &self.kv, &names_prefix(&self.namespace, prefix))
                .await
                .map_err(|f| self.lock_error(f))?;
        Ok(keys
            .iter()
            .map(|kv| {
                format!(
                    "{}: lease {:x}, created at revision {}",
                    printable(kv.key()),
                    kv.lease(),
                    kv.create_revision()
                )
            })
            .collect())
    }

    /// Every key of the names starting with `prefix`, of every primitive
    /// (with the empty prefix, every key in the namespace): all on leases,
    /// bar the `limit` keys the previous release left.
    async fn state_records(&self, prefix: &str) -> Result<Option<usize>, LockError> {
        let ns = &self.namespace;
        let ranges = if prefix.is_empty() {
            // The lock names' range is then the namespace, which holds the others.
            vec![names_prefix(ns, prefix)]
        } else {
            let names = names_prefix(ns, prefix);
            vec![
                names,
                rwlock_names_prefix(ns, prefix),
                semaphore_names_prefix(ns, prefix),
            ]
        };
        let mut total = 0;
        for range in ranges {
            let found = protocol::count_under(&self.rpc, &self.kv, &range).await;
            total += usize::try_from(found.map_err(|f| self.lock_error(f))?).unwrap_or(0);
        }
        Ok(Some(total))
    }

    async fn delete_holder(&self, key: &LockKey) -> Result<bool, LockError> {
        let (_, Some(oldest)) = self.holder_key(key).await? else {
            return Ok(false);
        };
        // Compared on the create revision: a holder that released meanwhile is not
        // confused with a new key of the same name.
        protocol::delete_found(&self.rpc, &self.kv, &oldest)
            .await
            .map_err(|f| self.lock_error(f))
    }

    async fn pitfalls(&self) -> Result<Vec<String>, LockError> {
        let mut warnings = Vec::new();
        match self.rpc.call("status", self.client.status()).await {
            Ok(status) => warnings.extend(version_pitfall(status.version())),
            Err(f) => warnings.push(format!(
                "cannot read the etcd status: {}",
                self.lock_error(f)
            )),
        }
        if let Ok(members) = self
            .rpc
            .call("member list", self.client.member_list())
            .await
            && members.members().len() == 1
        {
            warnings.push(
                "this etcd cluster has a single member: it is a single point of failure (run 3 or 5)"
                    .into(),
            );
        }
        Ok(warnings)
    }

    /// The member's database size in use: deleted keys stay in it as history
    /// until the cluster compacts (`--auto-compaction-retention`).
    async fn server_memory(&self) -> Result<Option<(&'static str, u64)>, LockError> {
        let status = self.rpc.call("status", self.client.status()).await;
        let in_use = status.map_err(|f| self.lock_error(f))?.db_size_in_use();
        Ok(Some(("db_size_in_use", in_use.unsigned_abs())))
    }

    fn ping_name(&self) -> Option<&'static str> {
        Some("linearizable GET")
    }

    async fn ping(&self) -> Result<(), LockError> {
        let key = format!("{}{PING_KEY}", self.namespace);
        self.rpc
            .call("GET", self.kv.get(key, None))
            .await
            .map(drop)
            .map_err(|f| self.lock_error(f))
    }

    fn floor(&self) -> Option<Floor> {
        Some(Floor {
            name: "put-if-absent txn on the client's lease + delete",
            requests: 2,
        })
    }

    /// The two writes etcd needs to take and give back a key: the lease is the
    /// client's own, as for a lock (granted once per ttl, kept alive on its
    /// stream), and the key is the one a lock of `key` would put.
    async fn floor_cycle(&self, key: &LockKey, ttl: Duration) -> Result<(), LockError> {
        let queue = queue_prefix(&self.namespace, key);
        let slot = self
            .leases
            .checkout(whole_seconds(ttl)?, &queue)
            .await
            .map_err(|f| self.lock_error(f))?;
        let lease = slot.lease().id();
        let mine = Bytes::from(contender_key(&queue, lease, slot.number()));
        let put = protocol::put_if_absent(&self.rpc, &self.kv, &mine, lease).await;
        if !put.map_err(|f| self.lock_error(f))? {
            return Err(LockError::Busy {
                key: key.clone(),
                holder: None,
            });
        }
        protocol::delete(&self.rpc, &self.kv, &mine)
            .await
            .map_err(|f| self.lock_error(f))?;
        slot.mark_clean();
        Ok(())
    }

    async fn server_requests(&self) -> Result<Option<u64>, LockError> {
        requests::requests_received(&self.client, &self.rpc)
            .await
            .map_err(|f| self.lock_error(f))
    }
}

/// The warning for an etcd release that weakens locks, if `version` is one.
fn version_pitfall(version: &str) -> Option<String> {
    let numbers: Vec<u32> = version
        .trim()
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .take(3)
        .map_while(|part| part.parse().ok())
        .collect();
    let release = match numbers[..] {
        [major, minor, patch] => (major, minor, patch),
        [major, minor] => (major, minor, 0),
        _ => return Some(format!("cannot read the etcd version from {version:?}")),
    };
    if release < (3, 4, 0) {
        Some(format!(
            "etcd {version} is end of life and resets lease ttls on every leader change (no lease \
             checkpoints): a lock can outlive its ttl after an election; upgrade to 3.5.3 or later"
        ))
    } else if ((3, 5, 0)..(3, 5, 3)).contains(&release) {
        Some(format!(
            "etcd {version} has the data-inconsistency bug fixed in 3.5.3 (a member that crashes can \
             apply writes differently), which upstream advises against in production; upgrade \
             to 3.5.3 or later"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::version_pitfall;

    #[test]
    fn old_and_inconsistent_releases_are_pitfalls() {
        assert!(version_pitfall("3.3.27").is_some_and(|w| w.contains("end of life")));
        assert!(version_pitfall("3.5.2").is_some_and(|w| w.contains("3.5.3")));
        assert!(version_pitfall("garbage").is_some_and(|w| w.contains("cannot read")));
        assert_eq!(version_pitfall("3.5.3"), None);
        assert_eq!(version_pitfall("3.6.0-alpha.0"), None);
        assert_eq!(version_pitfall("3.4"), None);
    }
}
