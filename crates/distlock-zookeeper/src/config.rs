//! Configuration, from a struct, its builder methods, or
//! `zk://[user:password@]h1:2181,h2:2181[/chroot][?params]`.

use crate::backend::{ZkBackend, ZkLock};
use crate::keys;
use crate::tls::ZkTls;
use crate::{ZkElection, ZkRwLockBackend, ZkSemaphoreBackend};
use distlock_core::adapter::BackendLock;
use distlock_core::toolkit::{DEFAULT_STATE_TTL, Host, LockUrl, Timeouts, check_state_ttl};
use distlock_core::{AcquireOptions, LockError};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client::{Acl, AuthId, Permission};

pub use client::AppClient;

const BACKEND: &str = "zookeeper";
/// ZooKeeper's client port, for servers listed without one.
const DEFAULT_PORT: u16 = 2181;

/// Digest credentials (`addauth digest user:password`). The password never appears
/// in `Debug`, errors or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestAuth {
    /// The user name.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for DigestAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestAuth")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The ACL put on every node the adapter creates: the namespace, the lock
/// directories and the lock nodes.
///
/// ZooKeeper checks *delete* against the parent's ACL, so what protects a holder's
/// node from other principals is the ACL of the lock directory, which is set by
/// whoever creates that directory first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AclPolicy {
    /// `world:anyone` may do everything (ZooKeeper's `OPEN_ACL_UNSAFE`). The
    /// default without credentials.
    Open,
    /// The creating principal may do everything, everyone else may only read (list
    /// the queue, watch). The default with credentials: other principals can neither
    /// join the queue nor delete a holder's node.
    Creator,
    /// Only the creating principal may touch the nodes, reading included.
    CreatorOnly,
}

impl std::str::FromStr for AclPolicy {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, ()> {
        match text {
            "open" => Ok(AclPolicy::Open),
            "creator" => Ok(AclPolicy::Creator),
            "creator_only" => Ok(AclPolicy::CreatorOnly),
            _ => Err(()),
        }
    }
}

impl AclPolicy {
    /// The ACL list put on created nodes.
    fn acls(self) -> Vec<Acl> {
        let creator = Acl::new(Permission::ALL, AuthId::authed());
        let world = |permission| Acl::new(permission, AuthId::anyone());
        match self {
            AclPolicy::Open => vec![world(Permission::ALL)],
            AclPolicy::Creator => vec![creator, world(Permission::READ)],
            AclPolicy::CreatorOnly => vec![creator],
        }
    }
}

/// How to reach ZooKeeper and where to put the locks.
///
/// ```
/// use distlock_core::toolkit::Timeouts;
/// use distlock_zookeeper::ZkConfig;
/// use std::time::Duration;
/// let config = ZkConfig::from_url("zk://app:secret@zk1:2181,zk2:2181/prod?namespace=locks&timeout=5s")?;
/// assert_eq!(config.endpoints, ["zk1:2181", "zk2:2181"]);
/// assert_eq!(config.chroot.as_deref(), Some("/prod"));
/// assert_eq!(config.namespace, "locks");
/// assert_eq!(config.timeouts.reply, Duration::from_secs(5));
/// assert!(!format!("{config:?}").contains("secret"));
/// let built = ZkConfig::new(["zk1:2181", "zk2:2181"])
///     .chroot("/prod")
///     .auth("app", "secret")
///     .namespace("locks")
///     .timeouts(Timeouts::new(Duration::from_secs(10), Duration::from_secs(5)));
/// assert_eq!(built, config);
/// # Ok::<(), distlock_core::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkConfig {
    /// Servers as `host[:port]` (port 2181 when left out); all of an ensemble, or
    /// some of them.
    pub endpoints: Vec<String>,
    /// A chroot applied to every path, such as `/prod`. It must exist.
    pub chroot: Option<String>,
    /// The node that holds every lock directory, relative to the chroot: one or more
    /// segments such as `distlock` or `apps/locks`. Default `distlock`.
    pub namespace: String,
    /// `None` (the default): each distinct lease ttl gets a session whose timeout
    /// is that ttl, so a crashed or paused holder loses the lock after its ttl.
    /// `Some(t)`: every lock shares one session of timeout `t`, and a ttl above the
    /// timeout the server grants is rejected (the lock would outlive what the
    /// client believes).
    pub session_timeout: Option<Duration>,
    /// Digest credentials for the session.
    pub auth: Option<DigestAuth>,
    /// The ACL on created nodes; `None` picks [`AclPolicy::Creator`] with
    /// credentials and [`AclPolicy::Open`] without.
    pub acl: Option<AclPolicy>,
    /// `connect`: how long establishing a session may take, retrying while
    /// servers do not answer or (after the first session) refuse while
    /// restarting; a first connect that every server refuses fails at once
    /// instead. `reply`: how long one request may take before it counts as
    /// failed. Both 10 s by default.
    pub timeouts: Timeouts,
    /// The lock's [`distlock_core::DistributedLock::default_options`] (the URL's
    /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`), checked against the server's
    /// session limits at connect.
    pub defaults: AcquireOptions,
    /// TLS to the servers' `secureClientPort` (the URL's `tls=true&ca=…`); needs
    /// the `tls` feature to connect.
    pub tls: Option<ZkTls>,
    /// The `state_ttl` every scheme takes (24 h, at least 2 s), checked and
    /// otherwise unused: a name's directories are container nodes that the
    /// server reaps once empty, every `znode.container.checkIntervalMs`.
    pub state_ttl: Duration,
    /// The application's own client, whose one session every lock shares
    /// ([`ZkConfig::from_client`]); `endpoints`, `chroot`, `auth` and `tls`
    /// are then unused.
    pub client: Option<AppClient>,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            endpoints: vec!["127.0.0.1:2181".into()],
            chroot: None,
            namespace: "distlock".into(),
            session_timeout: None,
            auth: None,
            acl: None,
            timeouts: Timeouts::new(Duration::from_secs(10), Duration::from_secs(10)),
            defaults: AcquireOptions::new(),
            tls: None,
            state_ttl: DEFAULT_STATE_TTL,
            client: None,
        }
    }
}

fn bad(reason: impl Into<String>) -> LockError {
    LockError::config(BACKEND, reason)
}

impl ZkConfig {
    /// The defaults, for the servers `endpoints` (`host[:port]`).
    pub fn new<E: Into<String>>(endpoints: impl IntoIterator<Item = E>) -> Self {
        ZkConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..ZkConfig::default()
        }
    }

    /// Applies a chroot, such as `/prod`, to every path.
    pub fn chroot(self, chroot: impl Into<String>) -> Self {
        let chroot = Some(chroot.into());
        ZkConfig { chroot, ..self }
    }

    /// Puts every lock directory under `namespace` (relative to the chroot).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        ZkConfig { namespace, ..self }
    }

    /// Authenticates the sessions with digest credentials.
    pub fn auth(self, user: impl Into<String>, password: impl Into<String>) -> Self {
        let (user, password) = (user.into(), password.into());
        let auth = Some(DigestAuth { user, password });
        ZkConfig { auth, ..self }
    }

    /// Puts `policy`'s ACL on every node created.
    pub fn acl(self, policy: AclPolicy) -> Self {
        let acl = Some(policy);
        ZkConfig { acl, ..self }
    }

    /// Shares one session of `timeout` among all locks instead of one per ttl.
    pub fn session_timeout(self, timeout: Duration) -> Self {
        let session_timeout = Some(timeout);
        ZkConfig {
            session_timeout,
            ..self
        }
    }

    /// How long establishing a session and one request may take (10 s each by
    /// default).
    pub fn timeouts(self, timeouts: Timeouts) -> Self {
        ZkConfig { timeouts, ..self }
    }

    /// Sets [`ZkConfig::state_ttl`], which changes nothing ZooKeeper keeps.
    pub fn state_ttl(self, state_ttl: Duration) -> Self {
        ZkConfig { state_ttl, ..self }
    }

    /// Connects over TLS with these settings (feature `tls`); list the servers'
    /// `secureClientPort`s.
    pub fn tls(self, tls: ZkTls) -> Self {
        let tls = Some(tls);
        ZkConfig { tls, ..self }
    }

    /// Parses `zk://[user:password@]host[:port][,host[:port]...][/chroot][?params]`
    /// (`zookeeper://` too).
    ///
    /// Parameters: `namespace=NAME`, `session_timeout=10s`, `connect_timeout=5s`,
    /// `timeout=5s`, `acl=open|creator|creator_only`, and the acquire defaults
    /// `ttl`, `wait`, `renewal`, `max_hold`, `min_hold`, and `state_ttl`. User and password are
    /// digest credentials. Unknown parameters are refused; `request_timeout` is
    /// now `timeout`.
    pub fn from_url(text: &str) -> Result<Self, LockError> {
        let mut url = LockUrl::parse(BACKEND, text)?;
        if !matches!(url.scheme(), "zk" | "zookeeper") {
            return Err(url.error("a ZooKeeper URL starts with zk:// (zk://host:2181/chroot)"));
        }
        if url.hosts().is_empty() {
            return Err(url.error(
                "no ZooKeeper servers given; list at least one host[:port], as in zk://zk1:2181,zk2:2181",
            ));
        }
        let mut config = ZkConfig::new(url.hosts().iter().map(Host::to_string));
        config.auth = match (url.user(), url.password()) {
            (None, None) => None,
            (Some(user), Some(password)) => Some(DigestAuth {
                user: user.to_owned(),
                password: password.to_owned(),
            }),
            _ => {
                return Err(url.error("credentials in the URL must be user:password (digest auth)"));
            }
        };
        config.chroot = url
            .path()
            .map(|path| path.trim_end_matches('/'))
            .filter(|path| !path.is_empty())
            .map(|path| format!("/{path}"));
        if let Some(namespace) = url.string("namespace") {
            config.namespace = namespace;
        }
        config.session_timeout = url.duration("session_timeout")?;
        config.timeouts = config.timeouts.read(&mut url)?;
        config.acl = url.parse_param("acl", "open, creator or creator_only")?;
        config.defaults = AcquireOptions::new().read(&mut url)?;
        config.state_ttl = url.duration("state_ttl")?.unwrap_or(config.state_ttl);
        config.tls = ZkTls::read(&mut url)?;
        url.finish()?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the configuration without contacting a server.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.endpoints.is_empty() && self.client.is_none() {
            return Err(bad(
                "no ZooKeeper servers given; list at least one host[:port]",
            ));
        }
        for endpoint in &self.endpoints {
            Host::parse(endpoint)
                .map_err(|why| bad(format!("{why}; list servers as zk://h1:2181,h2:2181")))?;
        }
        let invalid_path = |what: &str, path: &str, why: &str| {
            bad(format!(
                "{what} `{path}` is not a valid ZooKeeper path: {why}"
            ))
        };
        if let Some(chroot) = &self.chroot {
            keys::check_path(chroot, true).map_err(|why| invalid_path("chroot", chroot, why))?;
        }
        let namespace = format!("/{}", self.namespace);
        keys::check_path(&namespace, false)
            .map_err(|why| invalid_path("namespace", &namespace, why))?;
        if self.namespace.split('/').next() == Some("zookeeper") && self.chroot.is_none() {
            return Err(bad(
                "namespace `zookeeper` is reserved by ZooKeeper at the root; pick another namespace",
            ));
        }
        if let Some(auth) = &self.auth
            && (auth.user.is_empty() || auth.user.contains(':'))
        {
            return Err(bad(
                "the digest user must be non-empty and must not contain `:`",
            ));
        }
        self.timeouts.validate(BACKEND)?;
        check_state_ttl(BACKEND, self.state_ttl)?;
        if self.tls.is_some() && !cfg!(feature = "tls") {
            return Err(bad(
                "TLS to ZooKeeper needs TLS support, which this build lacks: enable the `tls` \
                 feature of the distlock crate (or of distlock-zookeeper when used directly)",
            ));
        }
        if self
            .session_timeout
            .is_some_and(|t| t.is_zero() || t.as_millis() > i32::MAX as u128)
        {
            return Err(bad("session_timeout must be between 1ms and 24 days"));
        }
        Ok(())
    }

    /// The ACL policy in effect: the configured one, or the default for the
    /// credentials given.
    pub fn acl_policy(&self) -> AclPolicy {
        self.acl.unwrap_or(if self.auth.is_some() {
            AclPolicy::Creator
        } else {
            AclPolicy::Open
        })
    }

    /// Connects: opens a first session, checks the chroot, and learns the server's
    /// session timeout range.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad configuration or a chroot that does not
    /// exist; [`LockError::Unavailable`] at once when every server refuses the
    /// connection (nothing listens there), and when no session is established
    /// within `connect_timeout` otherwise.
    pub async fn connect(self) -> Result<ZkLock, LockError> {
        self.validate()?;
        let defaults = self.defaults.clone();
        BackendLock::shared_with_primitives(
            Arc::new(ZkBackend::connect(self.settings()).await?),
            ZkSemaphoreBackend::new,
            ZkElection::new,
            ZkRwLockBackend::new,
        )
        .with_defaults(defaults)
    }
}

mod client;
#[cfg(test)]
mod tests;
