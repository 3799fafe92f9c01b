//! `connect(url)`: one entry point for every backend, chosen by URL scheme.

use crate::redact::{scrub, secrets_in};
use distlock_core::memory::MemoryStore;
use distlock_core::{DynLock, LockError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// One URL scheme: which backend serves it and which Cargo feature brings it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// The scheme as written before `://`, such as `rediss`.
    pub scheme: &'static str,
    /// The backend it connects to, such as `redis`.
    pub backend: &'static str,
    /// The Cargo feature of the `distlock` crate that enables it (`None`: always on).
    pub feature: Option<&'static str>,
    /// Whether this build has the feature on.
    pub enabled: bool,
    /// An example URL, for help texts.
    pub example: &'static str,
}

/// Every scheme `connect` knows, enabled in this build or not.
pub const SCHEMES: &[Scheme] = &[
    Scheme {
        scheme: "memory",
        backend: "memory",
        feature: None,
        enabled: true,
        example: "memory://NAME",
    },
    Scheme {
        scheme: "redis",
        backend: "redis",
        feature: Some("redis"),
        enabled: cfg!(feature = "redis"),
        example: "redis://[:PASSWORD@]HOST:6379/0",
    },
    Scheme {
        scheme: "rediss",
        backend: "redis",
        feature: Some("redis"),
        enabled: cfg!(feature = "redis"),
        example: "rediss://[:PASSWORD@]HOST:6380/0",
    },
    Scheme {
        scheme: "redlock",
        backend: "redlock",
        feature: Some("redlock"),
        enabled: cfg!(feature = "redlock"),
        example: "redlock://H1:6379,H2:6379,H3:6379",
    },
    Scheme {
        scheme: "redlocks",
        backend: "redlock",
        feature: Some("redlock"),
        enabled: cfg!(feature = "redlock"),
        example: "redlocks://H1:6380,H2:6380,H3:6380",
    },
    Scheme {
        scheme: "etcd",
        backend: "etcd",
        feature: Some("etcd"),
        enabled: cfg!(feature = "etcd"),
        example: "etcd://H1:2379,H2:2379/NAMESPACE",
    },
    Scheme {
        scheme: "etcds",
        backend: "etcd",
        feature: Some("etcd"),
        enabled: cfg!(feature = "etcd"),
        example: "etcds://H1:2379/NAMESPACE?ca=CA.pem",
    },
    Scheme {
        scheme: "zk",
        backend: "zookeeper",
        feature: Some("zookeeper"),
        enabled: cfg!(feature = "zookeeper"),
        example: "zk://H1:2181,H2:2181/CHROOT",
    },
    Scheme {
        scheme: "zookeeper",
        backend: "zookeeper",
        feature: Some("zookeeper"),
        enabled: cfg!(feature = "zookeeper"),
        example: "zookeeper://H1:2181/CHROOT",
    },
    Scheme {
        scheme: "mariadb",
        backend: "mysql",
        feature: Some("mysql"),
        enabled: cfg!(feature = "mysql"),
        example: "mariadb://USER:PASSWORD@HOST:3306/DB",
    },
    Scheme {
        scheme: "mysql",
        backend: "mysql",
        feature: Some("mysql"),
        enabled: cfg!(feature = "mysql"),
        example: "mysql://USER:PASSWORD@HOST:3306/DB?strategy=version_cas",
    },
];

/// Connects to the backend named by `url`'s scheme and returns a lock client.
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://NAME` | in-process [`crate::memory`] | always on |
/// | `redis://`, `rediss://` (TLS) | one Redis node | `redis` |
/// | `redlock://h1,h2,h3`, `redlocks://` (TLS) | Redlock over N independent Redis nodes | `redlock` |
/// | `etcd://h1,h2/namespace`, `etcds://` (TLS) | etcd | `etcd` |
/// | `zk://h1,h2/chroot`, `zookeeper://` | ZooKeeper | `zookeeper` |
/// | `mysql://user:pass@host/db?strategy=…`, `mariadb://` | MySQL 8 / MariaDB 10.6+ | `mysql` |
///
/// Every call returns an independent client (its own connections and reentrancy
/// scope). Each adapter documents its URL parameters (`namespace`, timeouts,
/// `strategy`, TLS files...) on its config's `from_url`. `memory://NAME` clients of one process share one in-process store per
/// `NAME`, so two `connect("memory://jobs")` calls contend like two processes on a
/// real server, while `memory://a` and `memory://b` never meet. That store lives
/// until the process exits.
///
/// # Errors
///
/// [`LockError::Config`] for a URL that does not parse, an unknown scheme (the
/// message lists the known ones) or a scheme whose feature this build lacks (the
/// message names the feature to enable); the adapter's own errors otherwise
/// ([`LockError::Unavailable`] when the server cannot be reached). No error shows
/// a password from the URL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, LockKey};
/// let lock = distlock::connect("memory://docs").await?;
/// let lease = lock.acquire(&LockKey::new("job")?, &AcquireOptions::new()).await?;
/// lease.release().await?;
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<DynLock, LockError> {
    let scheme = scheme_of(url)?;
    let secrets = secrets_in(url);
    connect_scheme(scheme, url)
        .await
        .map_err(|e| scrub(e, &secrets))
}

/// The scheme entry for `url`, with a clear error when there is none.
pub fn scheme_of(url: &str) -> Result<&'static Scheme, LockError> {
    let url = url.trim();
    if url.is_empty() {
        return Err(url_error(format!(
            "the lock URL is empty; use one of {}",
            known_schemes()
        )));
    }
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(url_error(format!(
            "a lock URL starts with SCHEME:// (for example memory://demo); use one of {}",
            known_schemes()
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let known = SCHEMES.iter().find(|s| s.scheme == scheme);
    let Some(known) = known else {
        let shown = if scheme.len() <= 20
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            format!("unknown scheme `{scheme}://`")
        } else {
            "unknown scheme".to_owned()
        };
        return Err(url_error(format!(
            "{shown}; use one of {}",
            known_schemes()
        )));
    };
    match known.feature {
        Some(feature) if !known.enabled => Err(LockError::config(
            known.backend,
            format!(
                "`{}://` URLs need the `{feature}` feature of the distlock crate, which this build lacks; \
                 enable it with `distlock = {{ version = \"{}\", features = [\"{feature}\"] }}` \
                 (or `features = [\"full\"]` for every backend)",
                known.scheme,
                env!("CARGO_PKG_VERSION"),
            ),
        )),
        _ => Ok(known),
    }
}

fn url_error(reason: String) -> LockError {
    LockError::config("distlock", reason)
}

fn known_schemes() -> String {
    SCHEMES
        .iter()
        .map(|s| format!("{}://", s.scheme))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn connect_scheme(scheme: &Scheme, url: &str) -> Result<DynLock, LockError> {
    let url = url.trim();
    match scheme.backend {
        "memory" => Ok(Arc::new(memory_store(memory_name(url)?).client())),
        #[cfg(feature = "redis")]
        "redis" => Ok(Arc::new(
            distlock_redis::RedisConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "redlock")]
        "redlock" => Ok(Arc::new(
            distlock_redis::RedlockConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Arc::new(
            distlock_etcd::EtcdConfig::from_url(url)?.connect().await?,
        )),
        #[cfg(feature = "zookeeper")]
        "zookeeper" => Ok(Arc::new(
            distlock_zookeeper::ZkConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "mysql")]
        "mysql" => Ok(Arc::new(
            distlock_mysql::MySqlConfig::from_url(url)?
                .connect()
                .await?,
        )),
        other => Err(LockError::config(
            "distlock",
            format!("the {other} backend is not wired into this build of the distlock facade"),
        )),
    }
}

/// The store name of a `memory://NAME` URL. Only letters, digits and `-_.` are
/// taken, so a typo (a path, a password) is an error rather than a silently
/// separate store.
fn memory_name(url: &str) -> Result<&str, LockError> {
    let name = url.trim().split_once("://").map_or("", |(_, rest)| rest);
    let name = name.strip_suffix('/').unwrap_or(name);
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.chars().all(allowed) {
        Ok(name)
    } else {
        Err(LockError::config(
            "memory",
            "a memory URL is memory:// or memory://NAME, where NAME (letters, digits, `-`, `_`, `.`) \
             picks the in-process store; it takes no user, path or query",
        ))
    }
}

/// The process-wide store behind `connect("memory://NAME")`. Use it in tests to
/// delete a lock behind its holder's back or to inspect residue.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use distlock::{AcquireOptions, LockKey};
/// let lock = distlock::connect("memory://ops").await?;
/// let key = LockKey::new("job")?;
/// let lease = lock.acquire(&key, &AcquireOptions::new()).await?;
/// assert!(distlock::memory_store("ops").delete(&key));
/// lease.lost().await; // the holder learns at once
/// # Ok(()) }
/// ```
pub fn memory_store(name: &str) -> MemoryStore {
    static STORES: OnceLock<Mutex<HashMap<String, MemoryStore>>> = OnceLock::new();
    STORES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(name.to_owned())
        .or_default()
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{AcquireOptions, LockKey};

    fn config_reason(result: Result<DynLock, LockError>) -> String {
        match result {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let reason = config_reason(connect("postgres://db/x").await);
        assert!(reason.contains("unknown scheme `postgres://`"), "{reason}");
        assert!(
            reason.contains("redlock://") && reason.contains("zk://"),
            "{reason}"
        );
        let reason = config_reason(connect("localhost:6379").await);
        assert!(reason.contains("SCHEME://"), "{reason}");
        assert!(config_reason(connect("").await).contains("empty"));
    }

    #[tokio::test]
    async fn memory_clients_of_one_name_contend_and_other_names_do_not() {
        let key = LockKey::new("shared").unwrap();
        let opts = AcquireOptions::new();
        let a = connect("memory://contend").await.unwrap();
        let b = connect("MEMORY://contend/").await.unwrap();
        let other = connect("memory://contend-other").await.unwrap();
        let lease = a.acquire(&key, &opts).await.unwrap();
        assert!(b.try_acquire(&key, &opts).await.unwrap().is_none());
        assert!(other.try_acquire(&key, &opts).await.unwrap().is_some());
        lease.release().await.unwrap();
        assert!(b.try_acquire(&key, &opts).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn memory_url_with_path_or_credentials_is_rejected() {
        for url in ["memory://a/b", "memory://u:p@a", "memory://a?x=1"] {
            let reason = config_reason(connect(url).await);
            assert!(reason.contains("memory://NAME"), "{url}: {reason}");
            assert!(!reason.contains(":p@"), "{reason}");
        }
    }

    #[tokio::test]
    async fn disabled_features_are_named() {
        for scheme in SCHEMES.iter().filter(|s| !s.enabled) {
            let url = format!("{}://u:topsecret@h:1", scheme.scheme);
            let reason = config_reason(connect(&url).await);
            let feature = scheme.feature.unwrap_or_default();
            assert!(
                reason.contains(&format!("features = [\"{feature}\"]")),
                "{reason}"
            );
            assert!(!reason.contains("topsecret"), "{reason}");
        }
    }
}
