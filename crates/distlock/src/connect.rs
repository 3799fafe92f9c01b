//! `connect(url)`: one entry point for every backend, chosen by URL scheme.

use crate::kind::BackendKind;
use crate::redact::{scrub, secrets_of};
use distlock_core::memory::MemoryStore;
use distlock_core::toolkit::LockUrl;
use distlock_core::{DynLock, LockError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

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
    let kind = BackendKind::from_url(url)?;
    let url = url.trim();
    connect_kind(kind, url)
        .await
        .map_err(|e| scrub(e, &url_secrets(kind, url)))
}

/// The passwords and tokens in `url`, to scrub from errors. A URL that does not
/// parse has none to find: the adapter refuses it with the same parser, whose
/// errors never quote a password.
pub(crate) fn url_secrets(kind: BackendKind, url: &str) -> Vec<String> {
    LockUrl::parse(kind.name(), url)
        .map(|url| secrets_of(&url))
        .unwrap_or_default()
}

async fn connect_kind(kind: BackendKind, url: &str) -> Result<DynLock, LockError> {
    match kind {
        BackendKind::Memory => Ok(Arc::new(memory_store(&memory_name(url)?).client())),
        #[cfg(feature = "redis")]
        BackendKind::Redis => Ok(Arc::new(
            distlock_redis::RedisConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "redlock")]
        BackendKind::Redlock => Ok(Arc::new(
            distlock_redis::RedlockConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "etcd")]
        BackendKind::Etcd => Ok(Arc::new(
            distlock_etcd::EtcdConfig::from_url(url)?.connect().await?,
        )),
        #[cfg(feature = "zookeeper")]
        BackendKind::ZooKeeper => Ok(Arc::new(
            distlock_zookeeper::ZkConfig::from_url(url)?
                .connect()
                .await?,
        )),
        #[cfg(feature = "mysql")]
        BackendKind::MySql => Ok(Arc::new(
            distlock_mysql::MySqlConfig::from_url(url)?
                .connect()
                .await?,
        )),
        // `from_url` refused these already; with every feature on there are none.
        #[allow(unreachable_patterns)]
        disabled => Err(disabled.disabled(url.split_once("://").map_or("", |(s, _)| s))),
    }
}

/// The store name of a `memory://NAME` URL. Only letters, digits and `-_.` are
/// taken, so a typo (a path, a password) is an error rather than a silently
/// separate store.
pub(crate) fn memory_name(url: &str) -> Result<String, LockError> {
    let url = LockUrl::parse("memory", url).map_err(|_| memory_url_error())?;
    let name = match url.hosts() {
        [] => "",
        [host] if host.port.is_none() => host.host.as_str(),
        _ => return Err(memory_url_error()),
    };
    let bare = url.user().is_none()
        && url.password().is_none()
        && matches!(url.path(), None | Some(""))
        && url.finish().is_ok();
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if bare && name.chars().all(allowed) {
        Ok(name.to_owned())
    } else {
        Err(memory_url_error())
    }
}

fn memory_url_error() -> LockError {
    LockError::config(
        "memory",
        "a memory URL is memory:// or memory://NAME, where NAME (letters, digits, `-`, `_`, `.`) \
         picks the in-process store; it takes no user, path or query",
    )
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
        let disabled = BackendKind::ALL.into_iter().filter(|k| !k.enabled());
        for scheme in disabled.flat_map(BackendKind::schemes) {
            let url = format!("{scheme}://u:topsecret@h:1");
            let reason = config_reason(connect(&url).await);
            let kind = BackendKind::from_scheme(scheme).unwrap();
            let feature = kind.feature().unwrap();
            assert!(
                reason.contains(&format!("features = [\"{feature}\"]")),
                "{reason}"
            );
            assert!(!reason.contains("topsecret"), "{reason}");
        }
    }
}
