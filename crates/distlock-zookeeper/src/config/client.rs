//! Where a client's sessions come from: sessions it opens to the configured
//! servers, or the one session of an application's own client
//! ([`ZkConfig::from_client`]); and the settings the backend is built from.

use super::{DEFAULT_PORT, ZkConfig};
use crate::backend::Settings;
use crate::session::SessionSettings;
use distlock_core::AcquireOptions;
use distlock_core::toolkit::Host;
use std::fmt;
use zookeeper_client as zk;

/// An application's own `zookeeper_client::Client`, held by a [`ZkConfig`].
/// Two are equal when they share one session.
#[derive(Clone)]
pub struct AppClient(pub(crate) zk::Client);

impl PartialEq for AppClient {
    fn eq(&self, other: &Self) -> bool {
        self.0.session_id() == other.0.session_id()
    }
}

impl Eq for AppClient {}

impl fmt::Debug for AppClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppClient")
            .field("session", &format_args!("{:#x}", self.0.session_id().0))
            .field("timeout", &self.0.session_timeout())
            .finish()
    }
}

impl ZkConfig {
    /// Every lock, semaphore, election and read-write lock of this client on
    /// the one session of your application's own `zookeeper_client::Client`
    /// (its servers, chroot and credentials); every other setting is this
    /// config's default, changed with the other fields and setters. distlock
    /// opens no session or connection of its own: it keeps a clone of the
    /// client, so the session lives as long as your clones or the lock's do.
    ///
    /// A session has one timeout, and a lock lives exactly as long as its
    /// session. So a ttl above the client's negotiated session timeout is
    /// refused (`InvalidOptions`, naming that timeout: use a ttl of at most
    /// it, or build the client with a longer `session_timeout`), and one
    /// below it is served but a crashed holder keeps the lock until the
    /// session expires, as with [`ZkConfig::session_timeout`]. The default
    /// ttl is the session timeout (what the server enforces), not 30 s.
    ///
    /// When the session ends (it expired, or authentication failed), the
    /// locks held on it are lost (their nodes go with it) and every later
    /// acquire fails naming the session: distlock cannot open another from
    /// your client, so build the lock again from a new one. Created nodes
    /// get the ACL of [`ZkConfig::acl`] (open unless set; set
    /// [`AclPolicy::Creator`](crate::AclPolicy::Creator) when the client
    /// authenticated).
    ///
    /// ```no_run
    /// use distlock_core::{AcquireOptions, DistributedLock, LockKey};
    /// use distlock_zookeeper::ZkConfig;
    /// use std::time::Duration;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = zookeeper_client::Client::connector()
    ///     .with_session_timeout(Duration::from_secs(30))
    ///     .connect("127.0.0.1:2181")
    ///     .await?; // the app's own
    /// let lock = ZkConfig::from_client(client).namespace("shop").connect().await?;
    /// let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    /// let lease = lock.acquire(&LockKey::new("sku-42")?, &opts).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_client(client: zk::Client) -> Self {
        ZkConfig {
            endpoints: Vec::new(),
            session_timeout: Some(client.session_timeout()),
            defaults: AcquireOptions::new().ttl(client.session_timeout()),
            client: Some(AppClient(client)),
            ..Self::default()
        }
    }

    /// The connect string the ZooKeeper client takes: `h1:2181,h2:2181/chroot`.
    pub(super) fn connect_string(&self) -> String {
        format!(
            "{}{}",
            self.endpoints.join(","),
            self.chroot.as_deref().unwrap_or("")
        )
    }

    /// What the backend is built from.
    pub(super) fn settings(self) -> Settings {
        let connect_string = self.connect_string();
        let servers: Vec<String> = self
            .endpoints
            .iter()
            .filter_map(|endpoint| Host::parse(endpoint).ok())
            .map(|host| host.address(DEFAULT_PORT))
            .collect();
        let endpoint = match &self.client {
            Some(AppClient(client)) => format!(
                "zk://{} (the application's client, session {:#x})",
                client.path(),
                client.session_id().0
            ),
            None => format!("zk://{connect_string}"),
        };
        Settings {
            acls: self.acl_policy().acls(),
            endpoint,
            // Four-letter words go over plain TCP, which a secure port refuses.
            first_server: servers.first().cloned().filter(|_| self.tls.is_none()),
            sessions: SessionSettings {
                connect_string,
                digest: self
                    .auth
                    .map(|auth| format!("{}:{}", auth.user, auth.password)),
                pinned: self.session_timeout,
                connect_timeout: self.timeouts.connect,
                servers,
                tls: self.tls,
                given: self.client.map(|AppClient(client)| client),
            },
            namespace: self.namespace,
            timeout: self.timeouts.reply,
            chroot: self.chroot,
        }
    }
}
