//! ZooKeeper: an `exists` as the raw round trip, the `srvr` word for the server
//! version, deletion of the queue's first node (the holder).

use super::{Probe, version};
use async_trait::async_trait;
use distlock::LockKey;
use distlock::zookeeper::{ZkConfig, layout};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

pub struct ZkProbe {
    client: zk::Client,
    namespace: String,
    first_endpoint: String,
}

impl ZkProbe {
    pub async fn connect(url: &str) -> Result<Self, String> {
        let config = ZkConfig::from_url(url).map_err(|e| e.to_string())?;
        let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(30));
        if let Some(auth) = &config.auth {
            connector = connector.with_auth(
                "digest",
                format!("{}:{}", auth.user, auth.password).as_bytes(),
            );
        }
        let client = connector
            .connect(&config.endpoints.join(","))
            .await
            .map_err(|e| e.to_string())?;
        let client = match &config.chroot {
            Some(chroot) => client
                .chroot(chroot.clone())
                .map_err(|_| format!("bad chroot {chroot}"))?,
            None => client,
        };
        Ok(ZkProbe {
            client,
            namespace: config.namespace.clone(),
            first_endpoint: config.endpoints.first().cloned().unwrap_or_default(),
        })
    }

    /// The `srvr` four-letter word's answer (allowed by default since 3.5.3).
    async fn srvr(&self) -> Result<String, String> {
        let endpoint = if self.first_endpoint.contains(':') {
            self.first_endpoint.clone()
        } else {
            format!("{}:2181", self.first_endpoint)
        };
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(&endpoint).await?;
            stream.write_all(b"srvr").await?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        tokio::time::timeout(Duration::from_secs(5), ask)
            .await
            .map_err(|_| "no answer".to_owned())?
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Probe for ZkProbe {
    fn round_trip_name(&self) -> Option<&'static str> {
        Some("exists /")
    }

    async fn round_trip(&self) -> Result<(), String> {
        self.client
            .check_stat("/")
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn pitfalls(&self) -> Vec<String> {
        let answer = match self.srvr().await {
            Ok(answer) => answer,
            Err(e) => {
                return vec![format!(
                    "cannot read the ZooKeeper version with `srvr` ({e}); allow it with \
                     4lw.commands.whitelist=srvr to let `distlock check` look for known bugs"
                )];
            }
        };
        let line = answer
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version:"))
            .map(str::trim);
        match line.and_then(version) {
            Some(v) if v < (3, 5, 4) => vec![format!(
                "ZooKeeper {} is older than 3.5.4: it has no container nodes (empty lock directories \
                 pile up) and predates fixes for ephemeral nodes that outlived their session \
                 (ZOOKEEPER-2355), which keeps a dead client's lock held; upgrade to 3.6 or later",
                line.unwrap_or_default()
            )],
            Some(_) => Vec::new(),
            None => vec![format!(
                "cannot parse the ZooKeeper version from {:?}",
                answer.lines().next()
            )],
        }
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String> {
        let dir = layout::lock_dir(&self.namespace, key.as_str());
        let children = match self.client.list_children(&dir).await {
            Err(zk::Error::NoNode) => return Ok(false),
            other => other.map_err(|e| e.to_string())?,
        };
        let Some(holder) = layout::sort_queue(children).into_iter().next() else {
            return Ok(false);
        };
        self.client
            .delete(&format!("{dir}/{holder}"), None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(true)
    }
}
