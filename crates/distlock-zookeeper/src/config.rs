//! Configuration, from a struct or from `zk://[user:password@]h1:2181,h2:2181[/chroot][?options]`.

use crate::ZkLock;
use crate::lock::ZkBackend;
use distlock_core::{BackendLock, LockError};
use std::time::Duration;

const BACKEND: &str = "zookeeper";

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

/// How to reach ZooKeeper and where to put the locks.
///
/// ```
/// use distlock_zookeeper::ZkConfig;
/// use std::time::Duration;
/// let config = ZkConfig::from_url("zk://app:secret@zk1:2181,zk2:2181/prod?namespace=locks")?;
/// assert_eq!(config.endpoints, ["zk1:2181", "zk2:2181"]);
/// assert_eq!(config.chroot.as_deref(), Some("/prod"));
/// assert_eq!(config.namespace, "locks");
/// assert!(!format!("{config:?}").contains("secret"));
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
    /// How long establishing a session may take. Default 10 s.
    pub connect_timeout: Duration,
    /// How long one request may take before it counts as failed. Default 10 s.
    pub request_timeout: Duration,
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
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        }
    }
}

fn bad(reason: impl Into<String>) -> LockError {
    LockError::config(BACKEND, reason)
}

impl ZkConfig {
    /// Parses `zk://[user:password@]host[:port][,host[:port]...][/chroot][?options]`.
    ///
    /// Options: `namespace=NAME`, `session_timeout=10s`, `connect_timeout=5s`,
    /// `request_timeout=5s`, `acl=open|creator|creator_only`. User and password
    /// are percent-decoded and used as digest credentials.
    pub fn from_url(url: &str) -> Result<Self, LockError> {
        let url = url.trim();
        let rest = url
            .strip_prefix("zk://")
            .or_else(|| url.strip_prefix("zookeeper://"))
            .ok_or_else(|| bad("a ZooKeeper URL starts with zk:// (zk://host:2181/chroot)"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut config = ZkConfig::default();
        let hosts = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                config.auth = Some(parse_userinfo(userinfo)?);
                hosts
            }
            None => authority,
        };
        config.endpoints = hosts
            .split(',')
            .map(parse_endpoint)
            .collect::<Result<_, _>>()?;
        if !path.is_empty() && path != "/" {
            let chroot = percent_decode(path)
                .ok_or_else(|| bad("the chroot in the URL is not valid percent-encoded UTF-8"))?;
            config.chroot = Some(chroot.trim_end_matches('/').to_owned());
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "namespace" => {
                    config.namespace = percent_decode(value)
                        .ok_or_else(|| bad("namespace is not valid percent-encoded UTF-8"))?
                }
                "session_timeout" => config.session_timeout = Some(parse_duration(name, value)?),
                "connect_timeout" => config.connect_timeout = parse_duration(name, value)?,
                "request_timeout" => config.request_timeout = parse_duration(name, value)?,
                "acl" => config.acl = Some(parse_acl(value)?),
                _ => {
                    return Err(bad(format!(
                        "unknown URL option `{}`; known: namespace, session_timeout, connect_timeout, request_timeout, acl",
                        name.chars().take(40).collect::<String>()
                    )));
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the configuration without contacting a server.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.endpoints.is_empty() {
            return Err(bad(
                "no ZooKeeper servers given; list at least one host[:port]",
            ));
        }
        for endpoint in &self.endpoints {
            parse_endpoint(endpoint)?;
        }
        if let Some(chroot) = &self.chroot {
            check_path("chroot", chroot, true)?;
        }
        check_path("namespace", &format!("/{}", self.namespace), false)?;
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
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() {
                return Err(bad(format!(
                    "{name} is zero; give it a positive duration such as 10s"
                )));
            }
        }
        if self
            .session_timeout
            .is_some_and(|t| t.is_zero() || t.as_millis() > i32::MAX as u128)
        {
            return Err(bad("session_timeout must be between 1 ms and 24 days"));
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

    /// The connect string the ZooKeeper client takes: `h1:2181,h2:2181/chroot`.
    pub(crate) fn connect_string(&self) -> String {
        format!(
            "{}{}",
            self.endpoints.join(","),
            self.chroot.as_deref().unwrap_or("")
        )
    }

    /// Where the servers are, for errors (never with credentials).
    pub(crate) fn display_endpoint(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// Connects: opens a first session, checks the chroot, and learns the server's
    /// session timeout range.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for a bad configuration or a chroot that does not
    /// exist, [`LockError::Unavailable`] when no server answers within
    /// `connect_timeout`.
    pub async fn connect(self) -> Result<ZkLock, LockError> {
        self.validate()?;
        Ok(BackendLock::new(ZkBackend::connect(self).await?))
    }
}

fn parse_userinfo(userinfo: &str) -> Result<DigestAuth, LockError> {
    let (user, password) = userinfo
        .split_once(':')
        .ok_or_else(|| bad("credentials in the URL must be user:password (digest auth)"))?;
    let decode = |what: &str, s: &str| {
        percent_decode(s).ok_or_else(|| {
            bad(format!(
                "the {what} in the URL is not valid percent-encoded UTF-8"
            ))
        })
    };
    Ok(DigestAuth {
        user: decode("user", user)?,
        password: decode("password", password)?,
    })
}

fn parse_endpoint(endpoint: &str) -> Result<String, LockError> {
    let endpoint = endpoint.trim();
    let invalid = || {
        bad(format!(
            "`{endpoint}` is not a host[:port]; list servers as zk://h1:2181,h2:2181"
        ))
    };
    let (host, port) = if let Some(rest) = endpoint.strip_prefix('[') {
        let (host, rest) = rest.split_once(']').ok_or_else(invalid)?;
        (host, rest.strip_prefix(':'))
    } else {
        match endpoint.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (endpoint, None),
        }
    };
    let host_ok = !host.is_empty() && !host.contains(['/', '@', ',', '?', ' ']);
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if host_ok && port_ok {
        Ok(endpoint.to_owned())
    } else {
        Err(invalid())
    }
}

/// Checks a ZooKeeper path by the server's own rules.
fn check_path(what: &str, path: &str, allow_root: bool) -> Result<(), LockError> {
    let invalid = |why: &str| {
        bad(format!(
            "{what} `{path}` is not a valid ZooKeeper path: {why}"
        ))
    };
    if !path.starts_with('/') {
        return Err(invalid("it must start with `/`"));
    }
    if path == "/" {
        return if allow_root {
            Ok(())
        } else {
            Err(invalid("it is empty"))
        };
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() {
            return Err(invalid("it has an empty segment (`//` or a trailing `/`)"));
        }
        if segment == "." || segment == ".." {
            return Err(invalid("`.` and `..` segments are not allowed"));
        }
        if segment.chars().any(crate::layout::forbidden_in_path) {
            return Err(invalid(
                "it has characters ZooKeeper forbids (controls, private use, U+FFF0..)",
            ));
        }
    }
    Ok(())
}

fn parse_duration(name: &str, value: &str) -> Result<Duration, LockError> {
    humantime::parse_duration(value).map_err(|e| {
        bad(format!(
            "{name}=`{}` is not a duration such as 10s or 500ms: {e}",
            value.chars().take(40).collect::<String>()
        ))
    })
}

fn parse_acl(value: &str) -> Result<AclPolicy, LockError> {
    match value {
        "open" => Ok(AclPolicy::Open),
        "creator" => Ok(AclPolicy::Creator),
        "creator_only" => Ok(AclPolicy::CreatorOnly),
        _ => Err(bad("acl must be open, creator or creator_only")),
    }
}

fn percent_decode(text: &str) -> Option<String> {
    crate::layout::unescape_name(text)
}

#[cfg(test)]
mod tests;
