//! etcd: a linearizable `Range` as the raw round trip, the server version and
//! membership for pitfalls, deletion of the queue's lowest key (the holder).

use super::url::{decode, parse};
use super::{Probe, version};
use async_trait::async_trait;
use distlock::LockKey;
use distlock::etcd::{DEFAULT_NAMESPACE, queue_prefix};
use etcd_client::{Client, ConnectOptions, GetOptions};

pub struct EtcdProbe {
    client: Client,
    namespace: String,
}

impl EtcdProbe {
    pub async fn connect(url: &str) -> Result<Self, String> {
        if url.trim().to_ascii_lowercase().starts_with("etcds") {
            return Err("the probe does not speak TLS to etcd; round trips, pitfalls and deletion are skipped".into());
        }
        let parts = parse(url);
        let endpoints: Vec<String> = parts
            .hosts
            .iter()
            .map(|h| {
                if h.contains(':') {
                    (*h).to_owned()
                } else {
                    format!("{h}:2379")
                }
            })
            .collect();
        let mut options = ConnectOptions::new().with_connect_timeout(super::CONNECT_TIMEOUT);
        if let Some((user, password)) = parts.credentials() {
            options = options.with_user(user, password);
        }
        let client = Client::connect(&endpoints, Some(options))
            .await
            .map_err(|e| e.to_string())?;
        // The adapter's rule: no path is the default namespace, `/` the root,
        // anything else that path with a trailing `/`.
        let namespace = match parts.path.map(decode) {
            None => DEFAULT_NAMESPACE.to_owned(),
            Some(path) if path.is_empty() || path.ends_with('/') => path,
            Some(path) => format!("{path}/"),
        };
        Ok(EtcdProbe { client, namespace })
    }
}

#[async_trait]
impl Probe for EtcdProbe {
    fn round_trip_name(&self) -> Option<&'static str> {
        Some("linearizable GET")
    }

    async fn round_trip(&self) -> Result<(), String> {
        let mut kv = self.client.kv_client();
        kv.get("distlock-probe/ping", None)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn pitfalls(&self) -> Vec<String> {
        let mut client = self.client.clone();
        let mut warnings = Vec::new();
        match client.status().await {
            Ok(status) => match version(status.version()) {
                Some(v) if v < (3, 4, 0) => warnings.push(format!(
                    "etcd {} is end of life and resets lease ttls on every leader change (no lease \
                     checkpoints): a lock can outlive its ttl after an election; upgrade to 3.5.3 or later",
                    status.version()
                )),
                Some(v) if ((3, 5, 0)..(3, 5, 3)).contains(&v) => warnings.push(format!(
                    "etcd {} has the data-inconsistency bug fixed in 3.5.3 (a member that crashes can \
                     apply writes differently), which upstream advises against in production; upgrade \
                     to 3.5.3 or later",
                    status.version()
                )),
                Some(_) => {}
                None => warnings.push(format!("cannot read the etcd version from {:?}", status.version())),
            },
            Err(e) => warnings.push(format!("cannot read the etcd status: {e}")),
        }
        if let Ok(members) = client.member_list().await
            && members.members().len() == 1
        {
            warnings.push(
                "this etcd cluster has a single member: it is a single point of failure (run 3 or 5)".into(),
            );
        }
        warnings
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String> {
        let mut kv = self.client.kv_client();
        let prefix = queue_prefix(&self.namespace, key);
        let queue = kv
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| e.to_string())?;
        // The holder is the key with the lowest create revision.
        let Some(holder) = queue.kvs().iter().min_by_key(|kv| kv.create_revision()) else {
            return Ok(false);
        };
        let deleted = kv
            .delete(holder.key(), None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(deleted.deleted() > 0)
    }
}
