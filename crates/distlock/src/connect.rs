//! `connect(url)`: one entry point for every backend, chosen by URL scheme.

use crate::kind::BackendKind;
use crate::redact::{scrub, secrets_of};
use distlock_core::memory::MemoryStore;
use distlock_core::toolkit::LockUrl;
use distlock_core::{AcquireOptions, DynLock, LockError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Connects to the backend named by `url`'s scheme and returns a lock client.
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://NAME` | in-process [`crate::memory`] | always on |
/// | `redis://`, `rediss://` (TLS) | one Redis node | `redis` |
/// | `redis+sentinel://s1,s2,s3/MASTER`, `rediss+sentinel://` | the Redis primary Sentinel names, followed across failovers | `redis` |
/// | `redis+cluster://n1,n2,n3`, `rediss+cluster://` | a Redis Cluster, each lock on its slot's primary | `redis` |
/// | `redlock://h1,h2,h3`, `redlocks://` (TLS) | Redlock over N independent Redis nodes | `redlock` |
/// | `etcd://h1,h2/namespace`, `etcds://` (TLS) | etcd | `etcd` |
/// | `zk://h1,h2/chroot`, `zookeeper://` (`?tls=true&ca=…`: TLS) | ZooKeeper | `zookeeper` |
/// | `mysql://user:pass@host/db?strategy=…`, `mariadb://` (`ssl-mode`, `ssl-ca`: TLS) | MySQL 8 / MariaDB 10.6+ | `mysql` |
/// | `postgres://user:pass@host/db?strategy=…`, `postgresql://` (`sslmode`, `sslrootcert`: TLS) | PostgreSQL 14+ | `postgres` |
///
/// TLS to etcd, ZooKeeper, MySQL and PostgreSQL also needs the `tls` feature (`rediss://`
/// and `redlocks://` need only `redis` or `redlock`); without it such a URL is a
/// [`LockError::Config`] naming the feature.
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
        BackendKind::Memory => {
            let (name, defaults) = memory_lock_url(url)?;
            Ok(Arc::new(
                memory_store(&name).client().with_defaults(defaults)?,
            ))
        }
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
        BackendKind::MySql => distlock_mysql::MySqlConfig::from_url(url)?.connect().await,
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => {
            distlock_postgres::PostgresConfig::from_url(url)?
                .connect()
                .await
        }
        // `from_url` refused these already; with every feature on there are none.
        #[allow(unreachable_patterns)]
        disabled => Err(disabled.disabled(url.split_once("://").map_or("", |(s, _)| s))),
    }
}

/// The store name of a `memory://NAME` URL. Only letters, digits and `-_.` are
/// taken, so a typo (a path, a password) is an error rather than a silently
/// separate store.
pub(crate) fn memory_name(url: &str) -> Result<String, LockError> {
    let (name, url) = memory_url(url)?;
    url.finish().map_err(|_| memory_url_error())?;
    Ok(name)
}

/// A `memory://NAME` lock URL: the store name, and the acquire defaults its
/// query may give (`ttl`, `wait`, `renewal`, `max_hold`, as on every scheme).
fn memory_lock_url(url: &str) -> Result<(String, AcquireOptions), LockError> {
    let (name, mut url) = memory_url(url)?;
    let defaults = AcquireOptions::new().read(&mut url)?;
    url.finish()?;
    Ok((name, defaults))
}

/// The store name of a `memory://` URL with no user, port or path; the query is
/// left to the caller.
fn memory_url(url: &str) -> Result<(String, LockUrl), LockError> {
    let url = LockUrl::parse("memory", url).map_err(|_| memory_url_error())?;
    let name = match url.hosts() {
        [] => "",
        [host] if host.port.is_none() => host.host.as_str(),
        _ => return Err(memory_url_error()),
    };
    let bare =
        url.user().is_none() && url.password().is_none() && matches!(url.path(), None | Some(""));
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if bare && name.chars().all(allowed) {
        Ok((name.to_owned(), url))
    } else {
        Err(memory_url_error())
    }
}

fn memory_url_error() -> LockError {
    LockError::config(
        "memory",
        "a memory URL is memory:// or memory://NAME, where NAME (letters, digits, `-`, `_`, `.`) \
         picks the in-process store; it takes no user, port or path, and a lock URL only the \
         acquire defaults ttl, wait, renewal and max_hold as its query",
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
    use distlock_core::{AcquireOptions, LockKey, Renewal, Wait};

    fn config_reason(result: Result<DynLock, LockError>) -> String {
        match result {
            Err(LockError::Config { reason, .. }) => reason,
            other => panic!("expected a Config error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unknown_scheme_lists_the_known_ones() {
        let reason = config_reason(connect("cockroach://db/x").await);
        assert!(reason.contains("unknown scheme `cockroach://`"), "{reason}");
        assert!(
            reason.contains("redlock://")
                && reason.contains("zk://")
                && reason.contains("postgres://"),
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
        for url in ["memory://a/b", "memory://u:p@a"] {
            let reason = config_reason(connect(url).await);
            assert!(reason.contains("memory://NAME"), "{url}: {reason}");
            assert!(!reason.contains(":p@"), "{reason}");
        }
        let reason = config_reason(connect("memory://a?x=1").await);
        assert!(reason.contains("unknown URL parameter `x`"), "{reason}");
        assert!(reason.contains("ttl, wait"), "{reason}");
        // A fenced store takes no lock defaults.
        let fence = crate::connect_fence("memory://a?ttl=5s").await;
        assert!(matches!(fence, Err(LockError::Config { .. })), "{fence:?}");
    }

    #[tokio::test]
    async fn url_acquire_defaults_are_the_locks_default_options() {
        let lock = connect("memory://defaults?ttl=5s&wait=250ms&renewal=manual&max_hold=1m")
            .await
            .unwrap();
        let defaults = lock.default_options();
        assert_eq!(defaults.get_ttl(), std::time::Duration::from_secs(5));
        assert_eq!(
            defaults.get_wait(),
            Wait::For(std::time::Duration::from_millis(250))
        );
        assert_eq!(defaults.get_renewal(), Renewal::Manual);
        assert_eq!(
            defaults.get_max_hold(),
            Some(std::time::Duration::from_secs(60))
        );
        let reason = config_reason(connect("memory://defaults?wait=soon").await);
        assert!(reason.contains("wait=soon"), "{reason}");
        match connect("memory://defaults?renewal=5s&ttl=2s").await {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.contains("renew interval"), "{reason}")
            }
            other => panic!("expected InvalidOptions, got {other:?}"),
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
